"""An eviction round that screens pages by the policy's priority floor evicts the same pages, in
the same order, as ranking every candidate (hypothesis: random prefix trees, hits, times, batch
sizes, protected zone and epochs)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.admission import Always, NoParams
from policies.eviction import Scored, ScoredParams
from sim.kv.paged_cache import FlooredEviction, PagedKVCache
from sim.kv.protected_zone import ProtectedZone
from tests.helpers import assert_same_cache_state, place_prompt, random_prompt

PAGE = 4


def make(num_pages: int, params: ScoredParams, batch: int, zone: bool, epoch: bool):
    return PagedKVCache(
        num_pages,
        PAGE,
        PAGE * 100,
        eviction=Scored(params),
        admission=Always(NoParams()),
        eviction_batch_pages=batch,
        epoch_reclaim=epoch,
        protected=ProtectedZone(num_pages, 0.5, 4, num_pages // 4) if zone else None,
    )


def replay(c: PagedKVCache, seed: int, steps: int) -> list[list[int]]:
    """Random requests over a few shared prefixes; returns the pages each allocation got."""
    rng = np.random.default_rng(seed)
    heads = [rng.integers(0, 50, size=PAGE * int(rng.integers(1, 6))) for _ in range(3)]
    got, now = [], 0.0
    for _ in range(steps):
        now += float(rng.choice([0.0, 0.5, 7.0, 90.0]))  # ties in time, and long idles
        tokens = random_prompt(rng, heads, PAGE)
        if tokens.size < 2:
            continue
        allocated, pages = place_prompt(c, tokens, PAGE, now)
        got.append(allocated)
        if allocated is None:
            continue
        c.end_epoch(now)
        c.release(pages, now + float(rng.choice([0.0, 0.2])))
    return got


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(12, 60),
    st.sampled_from([1, 3, 8, 64]),
    st.floats(0.5, 200.0),
    st.sampled_from([0.0, 0.05, 1.0, 20.0]),
    st.booleans(),
    st.booleans(),
)
def test_screened_rounds_evict_what_the_full_ranking_evicts(
    seed, num_pages, batch, half_life_s, length_weight, zone, epoch
):
    params = ScoredParams(half_life_s=half_life_s, length_weight=length_weight)
    screened = make(num_pages, params, batch, zone, epoch)
    full = make(num_pages, params, batch, zone, epoch)
    assert isinstance(screened.eviction, FlooredEviction)
    full._floor, full._shortlist = None, None  # the reference: every candidate ranked
    assert replay(screened, seed, 40) == replay(full, seed, 40)
    assert_same_cache_state(screened, full)


def test_the_floor_is_under_the_priority():
    stats_cache = make(16, ScoredParams(), 4, False, False)
    replay(stats_cache, 7, 30)
    pages = np.arange(16)
    policy = stats_cache.eviction
    for now in (0.0, 50.0, 1e6):
        assert (
            policy.priority_floor(stats_cache.stats, pages)
            <= policy.priority(stats_cache.stats, pages, now)
        ).all()
