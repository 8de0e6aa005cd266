"""A pool of fixed-size KV pages with reference counts and epoch-based reclamation.

Every page is in exactly one state: FREE (on the free list), USED (referenced by at least one
running request), CACHED (unreferenced but indexed by the prefix cache, evictable) or RETIRED
(released, waiting for the end of the batch step before it may be reused).
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum

import numpy as np


class PageState(IntEnum):
    FREE = 0
    USED = 1
    CACHED = 2
    RETIRED = 3


# Plain ints for the hot path: attribute access on an Enum class is slow in CPython.
FREE, USED, CACHED, RETIRED = (int(s) for s in PageState)


class PagePool:
    def __init__(self, num_pages: int, page_size: int, page_bytes: int, epoch_reclaim: bool = True):
        assert num_pages > 0
        self.num_pages = num_pages
        self.page_size = page_size
        self.page_bytes = page_bytes
        self.epoch_reclaim = epoch_reclaim
        self.ref_count = np.zeros(num_pages, dtype=np.int32)
        self.state = np.zeros(num_pages, dtype=np.int8)  # PageState
        self._free: deque[int] = deque(range(num_pages))
        self._retired: list[int] = []
        self.num_used = 0
        self.num_cached = 0

    # -- queries ---------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_retired(self) -> int:
        return len(self._retired)

    def check_invariants(self) -> None:
        """Pages conserved; counts never negative; state agrees with the reference count."""
        assert self.num_free + self.num_used + self.num_cached + self.num_retired == self.num_pages
        assert (self.ref_count >= 0).all()
        used = self.state == USED
        assert (self.ref_count[used] > 0).all() and (self.ref_count[~used] == 0).all()
        assert int(used.sum()) == self.num_used
        assert int((self.state == CACHED).sum()) == self.num_cached

    # -- mechanism -------------------------------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        """Take n free pages (caller checked num_free); each starts with one reference."""
        assert n <= len(self._free), "allocate() without enough free pages"
        pages = [self._free.popleft() for _ in range(n)]
        self.ref_count[pages] = 1
        self.state[pages] = USED
        self.num_used += n
        return pages

    def ref(self, page: int) -> None:
        """Add a reference: a cache hit on a USED or CACHED page."""
        state = self.state[page]
        assert state in (USED, CACHED), f"ref of page {page} in state {PageState(int(state)).name}"
        if state == CACHED:
            self.state[page] = USED
            self.num_cached -= 1
            self.num_used += 1
        self.ref_count[page] += 1

    def unref(self, page: int, keep_cached: bool) -> None:
        """Drop a reference. At zero the page stays CACHED (indexed) or is released."""
        assert self.ref_count[page] > 0, f"reference count of page {page} would go negative"
        self.ref_count[page] -= 1
        if self.ref_count[page]:
            return
        self.num_used -= 1
        if keep_cached:
            self.state[page] = CACHED
            self.num_cached += 1
        else:
            self._release(page)

    def unref_many(self, pages: list[int], indexed: np.ndarray) -> None:
        """Drop one reference from each of `pages` (distinct); at zero, CACHED if indexed else released."""
        arr = np.asarray(pages, dtype=np.int64)
        assert (self.ref_count[arr] > 0).all(), "reference count would go negative"
        self.ref_count[arr] -= 1
        zero = arr[self.ref_count[arr] == 0]
        if zero.size == 0:
            return
        self.num_used -= int(zero.size)
        keep = indexed[zero]
        cached = zero[keep]
        self.state[cached] = CACHED
        self.num_cached += int(cached.size)
        released = zero[~keep]
        if released.size:
            self.state[released] = RETIRED if self.epoch_reclaim else FREE
            (self._retired if self.epoch_reclaim else self._free).extend(released.tolist())

    def evict_many(self, pages: np.ndarray) -> None:
        """Drop unreferenced cached pages (the prefix cache already unindexed them).

        Nobody references a CACHED page, so no step can be reading it: it is free at once.
        """
        assert (self.state[pages] == CACHED).all()
        self.num_cached -= int(pages.size)
        self.state[pages] = FREE
        self._free.extend(pages.tolist())

    def end_epoch(self) -> int:
        """A whole batch step has finished: no reader can still hold retired pages."""
        n = len(self._retired)
        for page in self._retired:
            self.state[page] = FREE
            self._free.append(page)
        self._retired.clear()
        return n

    def _release(self, page: int) -> None:
        if self.epoch_reclaim:
            self.state[page] = RETIRED
            self._retired.append(page)
        else:
            self.state[page] = FREE
            self._free.append(page)
