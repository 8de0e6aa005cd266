"""Paged KV cache of one node: page pool + prefix index + the eviction and admission seams.

Mechanism only. Which unreferenced page goes first is the eviction policy's priority (lower goes
first); whether a request's new pages are indexed for reuse is the admission policy's call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim.kv.page_pool import CACHED, PagePool
from sim.kv.prefix_index import ROOT, Match, PrefixIndex


@dataclass(slots=True)
class PageStats:
    """Per-page arrays an eviction policy reads (indexed by page id)."""

    last_access_s: np.ndarray  # float64: last time a request referenced the page
    created_s: np.ndarray  # float64: when the page was indexed
    hit_count: np.ndarray  # int64: references since it was indexed (its first use counts)
    depth: np.ndarray  # int64: 1-based position of the page in its prefix
    page_size: int


CacheListener = Callable[[str, list[int], int], None]  # (event "stored"|"removed", page keys, node)


class PagedKVCache:
    def __init__(self, num_pages: int, page_size: int, page_bytes: int, *, eviction, admission,
                 prefix_cache: bool = True, verify_tokens: bool = True, epoch_reclaim: bool = True,
                 eviction_batch_pages: int = 64, node_id: int = 0):
        self.pool = PagePool(num_pages, page_size, page_bytes, epoch_reclaim)
        self.index = PrefixIndex(num_pages, page_size, verify_tokens)
        self.prefix_cache = prefix_cache
        self.eviction = eviction
        self.admission = admission
        self.eviction_batch_pages = eviction_batch_pages
        self.node_id = node_id
        self.stats = PageStats(
            last_access_s=np.zeros(num_pages), created_s=np.zeros(num_pages),
            hit_count=np.zeros(num_pages, dtype=np.int64), depth=self.index.depth, page_size=page_size,
        )
        self.listeners: list[CacheListener] = []
        self.num_evicted_pages = 0
        self.evicted_depths: list[int] = []  # prefix depth of every evicted page (for reports)
        self.admission_rejected_tokens = 0

    @property
    def page_size(self) -> int:
        return self.pool.page_size

    # -- prefix reuse ------------------------------------------------------------------------
    def match_prefix(self, keys: np.ndarray, prompt: np.ndarray, now: float) -> Match:
        """Reference the longest cached prefix. At least one prompt token is left to compute."""
        if not self.prefix_cache:
            return Match(pages=[])
        max_pages = (prompt.shape[0] - 1) // self.page_size
        match = self.index.match(keys, prompt, max_pages)
        for page in match.pages:
            self.pool.ref(page)
        if match.pages:
            self.stats.last_access_s[match.pages] = now
            self.stats.hit_count[match.pages] += 1
        return match

    def store_pages(self, pages: list[int], keys: np.ndarray, prompt: np.ndarray, first: int,
                    end: int, now: float) -> None:
        """Index the request's full prompt pages [first, end) once their KV is computed."""
        if not self.prefix_cache or end <= first:
            return
        indexed = self.index.indexed
        while first < end and indexed[pages[first]]:
            first += 1  # already indexed (reused from the cache)
        if first >= end:
            return
        parent = pages[first - 1] if first else ROOT
        if first and not indexed[parent]:
            return  # the chain is broken (a parent was not indexed): nothing below is reachable
        p = self.page_size
        chunk = pages[first:end]
        chunk_keys = keys[first:end].tolist()
        tokens = prompt[first * p : end * p].reshape(end - first, p)
        count = self.index.insert_chain(chunk, chunk_keys, parent, tokens)
        if count:
            new = chunk[:count]
            self.stats.created_s[new] = now
            self.stats.last_access_s[new] = now
            self.stats.hit_count[new] = 1
            self._emit("stored", chunk_keys[:count])

    def admit_segment(self, new_tokens: int, already_shared: bool) -> bool:
        """Admission policy: may this request's freshly computed segment enter the cache?"""
        if not self.prefix_cache:
            return False
        if self.admission.admit(new_tokens, already_shared):
            return True
        self.admission_rejected_tokens += new_tokens
        return False

    # -- allocation --------------------------------------------------------------------------
    def available_pages(self) -> int:
        return self.pool.num_free + self.pool.num_cached

    def allocate(self, n: int, now: float) -> list[int] | None:
        """n pages, evicting unreferenced cached pages if needed; None if even that is short."""
        if n > self.pool.num_free:
            if n > self.available_pages():
                return None
            self._evict(n - self.pool.num_free, now)
        return self.pool.allocate(n)

    def release(self, pages: list[int]) -> None:
        """A request is done with its pages; indexed ones stay cached (evictable), others go."""
        if pages:
            self.pool.unref_many(pages, self.index.indexed)

    def end_epoch(self) -> int:
        return self.pool.end_epoch()

    # -- eviction ----------------------------------------------------------------------------
    def _evict(self, need: int, now: float) -> None:
        """Free at least `need` pages (and the batch minimum) by the policy's priority order."""
        target = max(need, min(self.eviction_batch_pages, self.pool.num_cached))
        freed = 0
        while freed < need or (freed < target and self.pool.num_cached):
            candidates = np.flatnonzero(self.pool.state == CACHED)
            if candidates.size == 0:
                return
            priority = np.asarray(self.eviction.priority(self.stats, candidates, now), dtype=np.float64)
            k = min(candidates.size, target - freed)
            if k < candidates.size:
                part = np.argpartition(priority, k - 1)[:k]
                candidates, priority = candidates[part], priority[part]
            # Lowest priority first; ties: deeper (tail) pages first, then lower page id.
            order = np.lexsort((candidates, -self.index.depth[candidates], priority))
            freed += self._evict_pages(candidates[order].tolist())

    def _evict_pages(self, pages: list[int]) -> int:
        """Evict pages and their cached descendants, which no prefix walk could reach any more."""
        removed_keys, evicted = [], []
        state, index = self.pool.state, self.index
        stack = pages[::-1]
        while stack:
            p = stack.pop()
            if state[p] != CACHED or not index.indexed[p]:
                continue
            removed_keys.append(int(index.page_key[p]))
            evicted.append(p)
            stack.extend(c for c in index.remove(p) if state[c] == CACHED)
        if evicted:
            arr = np.array(evicted, dtype=np.int64)
            self.evicted_depths.extend(index.depth[arr].tolist())
            self.pool.evict_many(arr)
            self.num_evicted_pages += len(evicted)
            self._emit("removed", removed_keys)
        return len(evicted)

    def _emit(self, event: str, keys: list[int]) -> None:
        """One event per batch of pages: listeners (the routing table) pay one call, not one per page."""
        if keys:
            for listener in self.listeners:
                listener(event, keys, self.node_id)
