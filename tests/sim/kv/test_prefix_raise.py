"""Linking pages raises their ancestors' prefix_pages exactly as the plain walk does, though the
raises wait until a reader may see them (hypothesis: random chains extended a page or a run at a
time, branches, new roots, relinks, subtree removals; and a cache whose requests grow a page at
a time, evicting by prefix length, against the same cache raising at once)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.admission import Always, NoParams
from policies.eviction import Scored, ScoredParams
from sim.kv.hashing import page_keys
from sim.kv.index_base import ROOT
from sim.kv.paged_cache import PagedKVCache
from sim.kv.prefix_index import TwoLevelIndex

PAGE = 2
NUM_PAGES = 48


class WalkReference:
    """The straightforward links: every link walks its ancestors from the parent up, raising
    each below the new depth and stopping at the first already as deep."""

    def __init__(self):
        self.parent = np.full(NUM_PAGES, ROOT)
        self.depth = np.zeros(NUM_PAGES, dtype=np.int64)
        self.prefix_pages = np.zeros(NUM_PAGES, dtype=np.int64)

    def link(self, pages: list[int], parent: int) -> None:
        for page in pages:
            self.parent[page] = parent
            self.depth[page] = 1 if parent == ROOT else self.depth[parent] + 1
            parent = page
        deepest = int(self.depth[pages[-1]])
        self.prefix_pages[pages] = deepest
        up = int(self.parent[pages[0]])
        while up != ROOT and self.prefix_pages[up] < deepest:
            self.prefix_pages[up] = deepest
            up = int(self.parent[up])


def subtree(index: TwoLevelIndex, page: int) -> np.ndarray:
    out, stack = [], [page]
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(index.children(p).tolist())
    return np.array(out, dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(5, 80))
def test_prefix_pages_equal_the_walk(seed: int, steps: int):
    rng = np.random.default_rng(seed)
    index, ref = TwoLevelIndex(NUM_PAGES, PAGE), WalkReference()
    next_key = 1
    for _ in range(steps):
        indexed = np.flatnonzero(index.indexed)
        free = np.flatnonzero(~index.indexed)
        op = rng.random()
        if op < 0.2 and indexed.size:  # evict a subtree (closed under children)
            index.remove_many(subtree(index, int(rng.choice(indexed))))
            continue
        if op < 0.25 and indexed.size:  # one page and its descendants, one by one
            stack = [int(rng.choice(indexed))]
            while stack:
                stack.extend(index.remove(stack.pop()).tolist())
            continue
        if op < 0.3 and indexed.size > 1:  # relink an indexed leaf under another page
            leaves = indexed[index.num_children[indexed] == 0]
            page = int(rng.choice(leaves))
            others = indexed[indexed != page]
            parent = int(rng.choice(others)) if rng.random() < 0.8 else ROOT
            index._link([page], [int(index.page_key[page])], parent)  # changes its parent
            ref.link([page], parent)
            continue
        count = min(free.size, 1 if rng.random() < 0.6 else int(rng.integers(1, 6)))
        if count == 0:
            continue
        pages = [int(p) for p in rng.choice(free, size=count, replace=False)]
        tails = indexed[index.num_children[indexed] == 0]
        pick = rng.random()
        if pick < 0.5 and tails.size:  # extend a chain
            parent = int(rng.choice(tails))
        elif pick < 0.85 and indexed.size:  # branch
            parent = int(rng.choice(indexed))
        else:
            parent = ROOT
        keys = list(range(next_key, next_key + count))
        next_key += count
        tokens = rng.integers(0, 9, size=(count, PAGE)).astype(np.int32)
        assert index.insert_chain(pages, keys, parent, tokens) == list(range(count))
        ref.link(pages, parent)
        if rng.random() < 0.3:  # (reading prefix_pages applies the waiting raises)
            live = np.flatnonzero(index.indexed)
            assert (index.depth[live] == ref.depth[live]).all()
            assert (index.prefix_pages[live] == ref.prefix_pages[live]).all()
    live = np.flatnonzero(index.indexed)
    assert (index.prefix_pages[live] == ref.prefix_pages[live]).all()


def grow_and_evict(cache: PagedKVCache, seed: int, steps: int) -> list[list[int] | None]:
    """Requests over shared prefixes that, while running, index one more page per step (their
    generated tokens), then release; allocations evict by the prefix-length score."""
    rng = np.random.default_rng(seed)
    heads = [rng.integers(0, 9, size=PAGE * int(rng.integers(1, 5))) for _ in range(3)]
    running: list[tuple[list[int], np.ndarray, int]] = []  # (pages, tokens, pages indexed)
    got: list[list[int] | None] = []
    now = 0.0
    for _ in range(steps):
        now += float(rng.choice([0.0, 0.3, 4.0]))
        if rng.random() < 0.5 or not running:  # a new request
            tail = rng.integers(0, 9, size=PAGE * int(rng.integers(0, 4)) + 1)
            tokens = np.concatenate([heads[int(rng.integers(0, 3))], tail]).astype(np.int32)
            match = cache.match_prefix(page_keys(tokens, PAGE), tokens, now)
            pages = cache.allocate(-(-tokens.size // PAGE) - len(match.pages), now)
            got.append(pages)
            if pages is None:
                cache.release(list(match.pages), now)
            else:
                pages = list(match.pages) + pages
                full = tokens.size // PAGE
                cache.store_pages(
                    pages, page_keys(tokens, PAGE), tokens, len(match.pages), full, now
                )
                running.append((pages, tokens, full))
        for i, (pages, tokens, done) in enumerate(running):  # one more page each
            more = cache.allocate(1, now)
            got.append(more)
            if more is None:
                continue
            pages.append(more[0])
            tokens = np.concatenate([tokens, rng.integers(0, 9, size=PAGE).astype(np.int32)])
            if done == len(pages) - 1:
                keys = page_keys(tokens, PAGE)
                cache.store_pages(pages, keys, tokens, done, done + 1, now)
                done += 1
            running[i] = (pages, tokens, done)
        cache.end_epoch(now)
        while running and (len(running) > 4 or rng.random() < 0.3):
            cache.release(running.pop(int(rng.integers(0, len(running))))[0], now)
    return got


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(16, 64),
    st.sampled_from(["two_level", "radix"]),
    st.sampled_from([1, 4]),
)
def test_a_cache_raising_later_evicts_as_one_raising_at_once(seed, num_pages, index, batch):
    def make() -> PagedKVCache:
        return PagedKVCache(
            num_pages,
            PAGE,
            PAGE * 100,
            eviction=Scored(ScoredParams(half_life_s=2.0, length_weight=5.0)),
            admission=Always(NoParams()),
            index=index,
            eviction_batch_pages=batch,
        )

    later, at_once = make(), make()
    at_once.index.prefix.lazy = False
    assert grow_and_evict(later, seed, 40) == grow_and_evict(at_once, seed, 40)
    assert (later.index.indexed == at_once.index.indexed).all()
    assert (later.index.prefix_pages == at_once.index.prefix_pages).all()
