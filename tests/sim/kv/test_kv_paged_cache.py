"""Paged cache: which page is evicted, subtree drag, protected zone, admission, epoch-safe eviction."""

from __future__ import annotations

import numpy as np
import pytest

from policies.admission import Always, NoParams, Threshold, ThresholdParams
from policies.eviction import LRU, Scored, ScoredParams
from sim.kv.hashing import page_keys
from sim.kv.page_pool import CACHED, FREE
from sim.kv.paged_cache import PagedKVCache
from sim.kv.protected_zone import ProtectedZone

PAGE = 4


def cache(num_pages: int = 8, eviction=None, admission=None, **kw) -> PagedKVCache:
    return PagedKVCache(
        num_pages,
        PAGE,
        PAGE * 100,
        eviction=eviction or LRU(NoParams()),
        admission=admission or Always(NoParams()),
        eviction_batch_pages=1,
        **kw,
    )


def run_request(
    c: PagedKVCache, tokens: np.ndarray, now: float, read_s: float | None = None
) -> list[int]:
    """Admit, compute and finish one request whose prompt is `tokens`; returns its pages."""
    keys = page_keys(tokens, PAGE)
    match = c.match_prefix(keys, tokens, now)
    pages = list(match.pages)
    need = -(-tokens.size // PAGE) - len(pages)
    pages += c.allocate(need, now)
    first_key = int(keys[len(match.pages)]) if len(match.pages) < keys.size else None
    if c.admit_segment(tokens.size - len(match.pages) * PAGE, bool(match.pages), first_key):
        c.store_pages(pages, keys, tokens, len(match.pages), tokens.size // PAGE, now)
    c.release(pages, now if read_s is None else read_s)
    return pages


def prompt(*values: int) -> np.ndarray:
    return np.concatenate([np.arange(v, v + PAGE) for v in values]).astype(np.int32)


def test_lru_evicts_the_least_recent_prefix_tail_first():
    c = cache(num_pages=6)
    old = run_request(c, prompt(0, 10, 20), now=1.0)  # pages 0, 1, 2
    new = run_request(c, prompt(50, 60, 70), now=2.0)  # pages 3, 4, 5
    assert (old, new) == ([0, 1, 2], [3, 4, 5]) and c.pool.num_cached == 6
    assert c.allocate(1, 3.0) == [2]  # the old prefix's tail (ties on time: deeper first)
    assert c.allocate(1, 3.0) == [1] and c.num_evicted_pages == 2
    assert c.match_prefix(page_keys(prompt(0, 10, 20), PAGE), prompt(0, 10, 20, 30), 4.0).pages == [
        0
    ]


def test_evicting_a_head_unindexes_its_descendants():
    c = cache(num_pages=4, eviction=ScoredLike())
    run_request(c, prompt(0, 10, 20), now=1.0)
    assert c.allocate(2, 2.0) == [3, 0]  # the policy picks page 0: pages 1 and 2 go with it
    assert (
        not c.index.indexed[[0, 1, 2]].any() and c.pool.num_free == 2 and c.num_evicted_pages == 3
    )


class ScoredLike:
    """Test policy: the head of every prefix first (the worst possible order)."""

    def priority(self, stats, pages, now):
        return stats.depth[pages].astype(np.float64)


@pytest.mark.parametrize(
    "policy, expected",
    [
        # LRU: the one-off tails by age, then the system prompt's tail (used before the chat)
        (LRU(NoParams()), [4, 5, 6, 3]),
        # scored: one-off pages score ~1 (the chat's shorter prefix puts it before page 6, which
        # extends the 16-token system prompt); the system prompt scores ~3 and stays
        (Scored(ScoredParams(half_life_s=60, length_weight=1.0)), [4, 5, 7, 6]),
    ],
)
def test_scored_keeps_the_hot_system_prompt_where_lru_evicts_it(policy, expected):
    c = cache(num_pages=8, eviction=policy)
    system = prompt(0, 10, 20, 30)
    for t in (1, 2, 3):  # a 4-page system prompt (pages 0-3) reused by three requests (4, 5, 6)
        run_request(c, np.concatenate([system, prompt(100 * t)]), now=float(t))
    assert run_request(c, prompt(900), now=4.0) == [7]  # a one-off chat, the most recent
    victims = [c.allocate(1, 5.0)[0] for _ in range(4)]
    assert victims == expected


def test_protected_zone_is_never_evicted_and_is_capped():
    zone = ProtectedZone(8, share=0.5, window=2, max_pages=2)
    c = cache(num_pages=8, protected=zone)
    system = prompt(0, 10, 20)
    run_request(c, system, now=1.0)  # pages 0, 1, 2 (a miss: counts as a request with no reuse)
    run_request(
        c, np.concatenate([system, prompt(40)]), now=2.0
    )  # reuses 0, 1 (2 is the last page)
    assert list(c.protected_pages()) == [
        0,
        1,
    ]  # 1 of the last 2 requests >= 0.5; capped at 2: heads
    assert c.allocate(6, 3.0) is not None and c.pool.num_free == 0
    assert c.allocate(1, 3.0) is None  # only the zone is left
    assert c.index.indexed[[0, 1]].all() and c.pool.state[0] == CACHED


def test_short_unshared_segment_is_not_admitted_and_its_pages_are_freed():
    c = cache(
        num_pages=8, admission=Threshold(ThresholdParams(min_tokens=3 * PAGE)), epoch_reclaim=False
    )
    pages = run_request(c, prompt(0, 10), now=1.0)
    assert not c.index.indexed[pages].any() and (c.pool.state[pages] == FREE).all()
    assert c.admission_rejected_tokens == 2 * PAGE
    long = run_request(c, prompt(0, 10, 20), now=2.0)
    assert c.index.indexed[long].all()
    follow_up = run_request(
        c, prompt(0, 10, 20, 30), now=3.0
    )  # one new page, but extends a shared prefix
    assert c.index.indexed[follow_up].all() and c.admission_rejected_tokens == 2 * PAGE


def test_a_short_segment_seen_twice_is_admitted_on_second_sight():
    c = cache(
        num_pages=16, admission=Threshold(ThresholdParams(min_tokens=100)), epoch_reclaim=False
    )
    system = prompt(0, 10)  # a short system prompt every request starts with
    first = run_request(c, np.concatenate([system, prompt(20)]), now=1.0)
    assert not c.index.indexed[first].any()  # rejected, but remembered
    second = run_request(c, np.concatenate([system, prompt(30)]), now=2.0)
    assert c.index.indexed[second].all() and c.admission_rejected_tokens == 3 * PAGE
    third = np.concatenate([system, prompt(40)])
    assert c.match_prefix(page_keys(third, PAGE), third, 3.0).pages == second[:2]


def test_epoch_never_evicts_a_page_whose_reader_still_runs():
    c = cache(num_pages=2, epoch_reclaim=True, race_window_s=0.005)
    c.end_epoch(1.0)
    run_request(
        c, prompt(0, 10), now=1.0
    )  # both pages cached, last read at 1.0 (reader until 1.005)
    assert c.allocate(1, 1.001) is None and c.pool.num_cached == 2
    assert c.allocate(1, 1.006) == [1] and c.pool.use_after_free == 0
