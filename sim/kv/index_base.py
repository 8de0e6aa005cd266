"""What every prefix index shares: a forest of cached pages, one node per full page.

A page's parent is the page before it in its prompt (ROOT for the first page), so a cached prefix
is a root path and a lookup walks it. The index never owns memory: the page pool does; the index
only says which USED/CACHED pages can be found again, and by which prefix. Arrays are indexed by
page id. Implementations: `prefix_index.TwoLevelIndex` (hash screen + exact tokens, or hash only)
and `radix_index.RadixIndex` (token-exact tree).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from sim.kv.prefix_depth import ROOT, PrefixDepths

# Modelled bytes an engine would hold per indexed page, besides its token copy (4 bytes a token):
# tree links (parent id 8 + depth 8) and eviction statistics (last access, created, hit count:
# 8 each). The lookup structure's slot is added by each implementation.
LINK_AND_STATS_BYTES = 16 + 24
BLOCK_TABLE_ENTRY_BYTES = 4  # one int32 page id per page per running request
_ONE = np.int32(1)  # num_children's decrement, of its own dtype


@dataclass(slots=True)
class Match:
    pages: list[int]  # cached pages reused, in prefix order
    false_hits: int = 0  # level-1 hits whose page is not the request's own (caught, or not)
    wrong_reuse_tokens: int = 0  # tokens reused whose KV is not the request's own (hash_only)


class IndexBase(ABC):
    token_copy = True  # does the index keep a copy of each page's token ids?
    slot_bytes = 16  # lookup structure's bytes per page (hash or child-map slot: key + pointer)

    def __init__(self, num_pages: int, page_size: int, lazy_raises: bool = True):
        self.page_size = page_size
        self.num_indexed = 0
        self.page_key = np.zeros(num_pages, dtype=np.uint64)  # chained hash, for the routing table
        # int32 page ids and depths: 4 bytes a page less each, at hundreds of nodes
        self.parent = np.full(num_pages, ROOT, dtype=np.int32)
        self.depth = np.zeros(num_pages, dtype=np.int32)  # 1-based page position in its prefix
        self.indexed = np.zeros(num_pages, dtype=bool)
        self.num_children = np.zeros(num_pages, dtype=np.int32)  # indexed children
        # lazy_raises: chains hang only under pages their request holds (see prefix_depth.py)
        self.prefix = PrefixDepths(self.parent, self.depth, lazy_raises)

    def __len__(self) -> int:
        return self.num_indexed

    @property
    def prefix_pages(self) -> np.ndarray:
        """int32 [num_pages]: pages of the longest prefix ever indexed through each page (the
        deepest depth linked below it): never smaller than a descendant's, so "longer prefix"
        scores never favour a tail over its own head. Every waiting raise is applied first."""
        self.prefix.settle()
        return self.prefix.values

    @property
    def entry_bytes(self) -> int:
        """Modelled index bytes per indexed page (see LINK_AND_STATS_BYTES)."""
        return (
            self.slot_bytes + LINK_AND_STATS_BYTES + (4 * self.page_size if self.token_copy else 0)
        )

    def overhead_bytes(self) -> int:
        return self.num_indexed * self.entry_bytes

    def children(self, page: int) -> np.ndarray:
        """int64: indexed children of `page` (a vectorised scan; eviction needs it rarely)."""
        if self.num_children[page] == 0:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero((self.parent == page) & self.indexed)

    def stand_in(self, key: int) -> int | None:
        """The indexed page a request's unindexed page may hang its successors under (none here)."""
        return None

    def closed_under_children(self, pages: np.ndarray) -> bool:
        """Are all indexed children of these (distinct, indexed) pages among them?"""
        # Each page's children among them are some of its indexed children, so all are there
        # exactly when the counts add up: the pages whose parent is among them (one mark per
        # page; ROOT's -1 reads the extra last slot, never marked) against their child counts.
        marked = np.zeros(self.parent.size + 1, dtype=bool)
        marked[pages] = True
        inside = np.count_nonzero(marked[self.parent[pages]])
        return inside == int(self.num_children[pages].sum())

    def remove(self, page: int) -> np.ndarray:
        """Unindex a page; returns its indexed children (no prefix walk can reach them any more)."""
        self.prefix.unlinking()
        children = self.children(page)
        pages = np.array([page], dtype=np.int64)
        self._forget(pages, self.page_key[pages].tolist())
        self._unlink(page)
        return children

    def remove_many(self, pages: np.ndarray) -> list[int]:
        """Unindex a set of pages holding every indexed child of its members (vectorised).
        Returns their keys, in order (what the cache's listeners are told)."""
        self.prefix.removing(pages)
        keys = self.page_key[pages].tolist()
        self._forget(pages, keys)
        parents = self.parent[pages]
        self.indexed[pages] = False
        self.prefix.removed(self.indexed)
        outer = parents[parents != ROOT]
        # parents left in the index (an int32 one: numpy's fast path; a Python 1 takes the
        # casting loop, ~10x slower on a round's ~200 pages)
        np.subtract.at(self.num_children, outer[self.indexed[outer]], _ONE)
        self.parent[pages] = ROOT
        self.num_children[pages] = 0
        self.num_indexed -= int(pages.size)
        return keys

    @abstractmethod
    def match(self, keys: np.ndarray, prompt: np.ndarray, max_pages: int) -> Match:
        """The longest indexed prefix of this prompt, at most max_pages pages."""

    @abstractmethod
    def insert_chain(
        self, pages: list[int], keys: list[int], parent: int, tokens: np.ndarray
    ) -> list[int]:
        """Index consecutive full pages under `parent`; returns the positions indexed."""

    def insert_page(self, page: int, key: int, parent: int, tokens: np.ndarray) -> bool:
        """`insert_chain` of one page (tokens: its int32 [page_size] ids): was it indexed?"""
        return bool(self.insert_chain([page], [key], parent, tokens.reshape(1, -1)))

    @abstractmethod
    def _forget(self, pages: np.ndarray, keys: list[int]) -> None:
        """Drop the pages (whose keys are `keys`) from the lookup structure (the
        implementation's dicts)."""

    # -- linkage shared by the implementations -------------------------------------------------
    def _link(self, pages: list[int], keys: list[int], parent: int) -> np.ndarray | None:
        """Record a chain of new pages under `parent` (pages[i] is the parent of pages[i + 1]).
        Returns the pages as an int64 array (None for a single page)."""
        count = len(pages)
        if count == 1:  # a request indexing its generated tokens: one page at a time
            self._link_one(pages[0], keys[0], parent)
            return None
        arr = np.array(pages, dtype=np.int64)
        if self.indexed[arr].any():  # a linked page changes its parent
            self.prefix.relinking()
        # (fromiter: half the cost of converting a list of 64-bit ints by assignment)
        self.page_key[arr] = np.fromiter(keys, dtype=np.uint64, count=count)
        self.parent[arr[1:]] = arr[:-1]
        self.parent[arr[0]] = parent
        base = 0 if parent == ROOT else int(self.depth[parent])
        self.depth[arr] = np.arange(base + 1, base + 1 + count)
        self.indexed[arr] = True
        self.num_children[arr[:-1]] += 1
        self.num_children[arr[-1]] = 0
        if parent != ROOT:
            self.num_children[parent] += 1
        self.prefix.linked(pages, parent, base + count, arr)
        self.num_indexed += count
        return arr

    def _link_one(self, page: int, key: int, parent: int) -> None:
        """`_link` of one page, with scalar writes (the same values)."""
        if self.indexed[page]:
            self.prefix.relinking()
        self.page_key[page] = key
        self.parent[page] = parent
        deepest = 1 if parent == ROOT else int(self.depth[parent]) + 1
        self.depth[page] = deepest
        self.indexed[page] = True
        self.num_children[page] = 0
        if parent != ROOT:
            self.num_children[parent] += 1
        self.prefix.linked([page], parent, deepest)
        self.num_indexed += 1

    def _unlink(self, page: int) -> None:
        assert self.indexed[page]
        self.indexed[page] = False
        parent = int(self.parent[page])
        if parent != ROOT and self.indexed[parent]:  # a dragged subtree unlinks its head first
            self.num_children[parent] -= 1
        self.parent[page] = ROOT
        self.num_children[page] = 0
        self.num_indexed -= 1
