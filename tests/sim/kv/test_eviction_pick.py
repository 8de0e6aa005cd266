"""An eviction round's ranking shortcuts pick what the plain formulas pick (hypothesis): `_pick`
(ties with the k-th ranked by one integer key) against one lexsort of (priority, deeper first,
lower id); `_once_each` keeps every page once, whatever the repeats and their order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.admission import Always, NoParams
from policies.eviction import LRU
from sim.kv import paged_cache
from sim.kv.paged_cache import PagedKVCache

NUM_PAGES = 64


def cache_with_depths(depths: list[int]) -> PagedKVCache:
    cache = PagedKVCache(NUM_PAGES, 4, 400, eviction=LRU(NoParams()), admission=Always(NoParams()))
    cache.index.depth[:] = depths
    return cache


def reference_pick(cache: PagedKVCache, pages: np.ndarray, priority: np.ndarray, k: int):
    """The k first of every page by (priority, deeper first, lower id): one lexsort."""
    order = np.lexsort((pages, -cache.index.depth[pages], priority))[:k]
    return pages[order]


@settings(max_examples=300, deadline=None)
@given(
    depths=st.lists(st.integers(0, 6), min_size=NUM_PAGES, max_size=NUM_PAGES),
    picked=st.lists(st.integers(0, NUM_PAGES - 1), min_size=1, max_size=NUM_PAGES, unique=True),
    levels=st.lists(st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.5, np.inf]), min_size=NUM_PAGES),
    k=st.integers(1, NUM_PAGES),
    kth_given=st.booleans(),
    tied_min=st.sampled_from([0, 8, paged_cache.PICK_TIED_MIN]),
)
def test_pick_is_the_lexsort_order(depths, picked, levels, k, kth_given, tied_min):
    cache = cache_with_depths(depths)
    pages = np.array(picked, dtype=np.int64)
    priority = np.array(levels[: pages.size], dtype=np.float64)  # few levels: many ties
    k = min(k, pages.size)
    kth = np.partition(priority, k - 1)[k - 1] if kth_given else None
    default, paged_cache.PICK_TIED_MIN = paged_cache.PICK_TIED_MIN, tied_min  # small rounds
    try:  # take _pick_tied's path too
        got = cache._pick(pages, priority, k, kth)
    finally:
        paged_cache.PICK_TIED_MIN = default
    assert got.tolist() == reference_pick(cache, pages, priority, k).tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, NUM_PAGES - 1), max_size=3 * NUM_PAGES))
def test_once_each_keeps_every_page_once(repeated):
    cache = cache_with_depths([1] * NUM_PAGES)
    pages = np.array(repeated, dtype=np.int64)
    kept = cache._once_each(pages)
    assert sorted(kept.tolist()) == sorted(set(repeated))
