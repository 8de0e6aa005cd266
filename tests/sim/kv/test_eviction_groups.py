"""The shortlist's groups (sim/kv/shortlist.py): pages of equal statistics, scored once a group.
Rounds that take their victims from the heads of the lowest groups evict the same pages, in the
same order, as ranking every candidate each round, with every index kind (hash_only raises
prefix_pages of cached pages; radix and two_level do not) (hypothesis); a group lists pages of
its statistics, in eviction order; a policy reads no statistic but those it names in `reads`."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.admission import Always, NoParams
from sim.kv.paged_cache import PagedKVCache
from sim.kv.shortlist import Shortlist
from sim.kv.views import PageStats
from tests.sim.kv.test_eviction_shortlist import (
    BATCHES,
    PAGE,
    POLICIES,
    POOL_PAGES,
    RACES,
    SEEDS,
    assert_evicts_as_ranking_all,
)


def make(policy: str, index: str, num_pages: int, batch: int, race_s: float, reserve: int):
    cache = PagedKVCache(
        num_pages,
        PAGE,
        PAGE * 100,
        eviction=POLICIES[policy](),
        admission=Always(NoParams()),
        index=index,
        eviction_batch_pages=batch,
        epoch_reclaim=race_s >= 0,
        race_window_s=max(race_s, 0.0),
    )
    cache._shortlist = Shortlist(cache.eviction, reserve)
    cache._queue = None
    return cache


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(POLICIES)),
    st.sampled_from(["two_level", "hash_only", "radix"]),
    SEEDS,
    POOL_PAGES,
    BATCHES,
    RACES,
    st.sampled_from([1, 4, 16]),
)
def test_grouped_rounds_evict_what_the_full_ranking_evicts(
    policy, index, seed, num_pages, batch, race_s, reserve
):
    grouped = make(policy, index, num_pages, batch, race_s, reserve)
    full = make(policy, index, num_pages, batch, race_s, reserve)
    full._shortlist = None  # the reference: every candidate ranked every round
    assert_evicts_as_ranking_all(grouped, full, seed, 80)
    assert_groups_hold(grouped)


def assert_groups_hold(cache: PagedKVCache) -> None:
    """Each page a group lists has the group's statistics and comes after the group's earlier
    pages in eviction order; it is listed by one group only."""
    shortlist = cache._shortlist
    assert shortlist is not None
    if shortlist.groups is None:
        return
    seen: set[int] = set()
    for g, group in enumerate(shortlist.groups):
        pages = group.rest()[shortlist.owner[group.rest()] == group.id]
        for name, values in zip(shortlist.fields, shortlist.values, strict=True):
            assert (getattr(cache.stats, name)[pages] == values[g]).all()
        depth = cache.index.depth[pages]
        keys = list(zip((-depth).tolist(), pages.tolist(), strict=True))
        assert keys == sorted(keys)
        assert seen.isdisjoint(pages.tolist())
        seen.update(pages.tolist())


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(sorted(POLICIES)), st.integers(0, 2**32 - 1))
def test_a_policy_reads_only_what_it_names(policy, seed):
    rng = np.random.default_rng(seed)
    n = 8

    def stats() -> PageStats:
        fields = {
            "last_access_s": rng.uniform(0, 10, n),
            "created_s": rng.uniform(0, 10, n),
            "hit_count": rng.integers(1, 5, n).astype(np.int32),
            "prefix_pages": rng.integers(1, 9, n).astype(np.int32),
        }
        return PageStats(depth=rng.integers(1, 9, n).astype(np.int32), page_size=PAGE, **fields)

    evict = POLICIES[policy]()
    base, other = stats(), stats()
    for name in evict.reads:  # the same named statistics, every other one different
        setattr(other, name, getattr(base, name))
    pages = np.arange(n)
    assert (evict.priority(base, pages, 12.5) == evict.priority(other, pages, 12.5)).all()
