"""Eviction rounds that score only the shortlist carried from the last round evict the same pages,
in the same order, as ranking every candidate each round (hypothesis: every built-in policy,
random prefix trees, hits, idles, batch sizes, protected zone, epochs with a race window)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.admission import Always, NoParams
from policies.eviction import FIFO, LFU, LRU, Scored, ScoredParams
from sim.kv.paged_cache import PagedKVCache
from sim.kv.protected_zone import ProtectedZone
from sim.kv.shortlist import Shortlist
from tests.helpers import assert_same_cache_state, place_prompt, random_prompt

PAGE = 4
POLICIES = {
    "lru": lambda: LRU(NoParams()),
    "lfu": lambda: LFU(NoParams()),
    "fifo": lambda: FIFO(NoParams()),
    "scored": lambda: Scored(ScoredParams(half_life_s=5.0, length_weight=0.5)),
    "scored_flat": lambda: Scored(ScoredParams(half_life_s=0.5, length_weight=0.0)),
}


def new_cache(policy: str, num_pages: int, batch: int, zone: bool, race_s: float) -> PagedKVCache:
    """A small cache under `policy` (with epoch reclamation when race_s >= 0, a protected zone
    of half the pool when `zone`), as the carried-round tests build it."""
    return PagedKVCache(
        num_pages,
        PAGE,
        PAGE * 100,
        eviction=POLICIES[policy](),
        admission=Always(NoParams()),
        eviction_batch_pages=batch,
        epoch_reclaim=race_s >= 0,
        race_window_s=max(race_s, 0.0),
        protected=ProtectedZone(num_pages, 0.5, 4, num_pages // 4) if zone else None,
    )


def make(policy: str, num_pages: int, batch: int, zone: bool, race_s: float, reserve: int):
    cache = new_cache(policy, num_pages, batch, zone, race_s)
    # (lru, lfu and fifo rank every page each round: they can carry a shortlist all the same)
    cache._shortlist = Shortlist(cache.eviction, reserve)
    cache._queue = None  # (lru, lfu and fifo queue their victims otherwise)
    return cache


def replay(c: PagedKVCache, seed: int, steps: int) -> list[list[int] | None]:
    """Random requests over a few shared prefixes, some still running while others allocate;
    returns the pages each allocation got."""
    rng = np.random.default_rng(seed)
    heads = [rng.integers(0, 50, size=PAGE * int(rng.integers(1, 6))) for _ in range(3)]
    got: list[list[int] | None] = []
    running: list[list[int]] = []
    now = 0.0
    for _ in range(steps):
        now += float(rng.choice([0.0, 0.01, 0.5, 7.0, 90.0]))  # ties in time, and long idles
        tokens = random_prompt(rng, heads, PAGE)
        if tokens.size >= 2:
            allocated, pages = place_prompt(c, tokens, PAGE, now)
            got.append(allocated)
            if allocated is not None:
                running.append(pages)
        c.end_epoch(now)
        while running and (len(running) > 3 or rng.random() < 0.5):
            c.release(running.pop(int(rng.integers(0, len(running)))), now)
    return got


# What the carried-round tests draw: a replay seed, pool pages, a round's batch, a race window
# (-1: no epoch reclamation)
SEEDS = st.integers(0, 2**32 - 1)
POOL_PAGES = st.integers(12, 60)
BATCHES = st.sampled_from([1, 3, 8])
RACES = st.sampled_from([-1.0, 0.0, 0.3])


def assert_evicts_as_ranking_all(carried: PagedKVCache, full: PagedKVCache, seed: int, steps: int):
    """`carried` (rounds from what a full round carried) and `full` (every candidate ranked
    every round), replaying the same requests, get the same pages and end in the same state."""
    assert replay(carried, seed, steps) == replay(full, seed, steps)
    assert_same_cache_state(carried, full)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(POLICIES)),
    SEEDS,
    POOL_PAGES,
    BATCHES,
    st.booleans(),
    RACES,
    st.sampled_from([1, 4, 16]),
)
def test_shortlisted_rounds_evict_what_the_full_ranking_evicts(
    policy, seed, num_pages, batch, zone, race_s, reserve
):
    shortlisted = make(policy, num_pages, batch, zone, race_s, reserve)
    full = make(policy, num_pages, batch, zone, race_s, reserve)
    assert shortlisted._shortlist is not None
    full._shortlist = None  # the reference: every candidate ranked every round
    assert_evicts_as_ranking_all(shortlisted, full, seed, 60)


def count_rounds(cache: PagedKVCache, carried: str, seed: int, steps: int) -> dict[str, int]:
    """Replay `cache` counting its full rounds and the rounds its `carried` method (the
    shortlist's or the queue's: None when it cannot decide) chose the victims of."""
    rounds = {"full": 0, "carried": 0}
    ranked, fast = cache._ranked_victims, getattr(cache, carried)

    def count_ranked(want, now):
        rounds["full"] += 1
        return ranked(want, now)

    def count_carried(want, now):
        victims = fast(want, now)
        rounds["carried"] += victims is not None
        return victims

    cache._ranked_victims = count_ranked  # type: ignore[method-assign]
    setattr(cache, carried, count_carried)
    replay(cache, seed, steps)
    return rounds


def test_most_rounds_score_the_shortlist_only():
    rounds = count_rounds(make("scored", 40, 3, False, 0.0, 16), "_shortlisted_victims", 3, 200)
    assert rounds["carried"] > rounds["full"] > 0
