"""A pool of fixed-size KV pages: reference counts, a FIFO free list, and reclamation.

Every page is in exactly one state: FREE (on the free list), USED (referenced by at least one
running request), CACHED (unreferenced but indexed by the prefix cache, evictable) or RETIRED
(released, held until no reader can still see it).

The reader model (the article's pitfall 3). A batch step reads the pages of its requests, and the
reader may outlive the step as the scheduler sees it by `race_window_s` (kernels still draining,
an asynchronous copy: the scheduler runs ahead of the GPU). `read_until_s[p]` is when the last
reader of page p finishes; handing p to a new owner before then is a use-after-free, counted in
`use_after_free` (it is ground truth, which the reclamation itself never consults).
- immediate: a page whose count reaches zero goes straight back to the free list.
- epoch: it is retired in the current epoch (the number of finished steps). A retired batch returns
  to the free list once one whole step has finished after it and the readers of the steps before
  it have exited (epoch-based reclamation, the article's fix); when memory is short, as soon as
  those readers have exited. A cached page is evicted only once the readers of its last use have
  exited (else it is retired the same way).
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum

import numpy as np

from sim.kv.epochs import Epochs


class PageState(IntEnum):
    FREE = 0
    USED = 1
    CACHED = 2
    RETIRED = 3


# Plain ints for the hot path: attribute access on an Enum class is slow in CPython.
FREE, USED, CACHED, RETIRED = (int(s) for s in PageState)

# Page ids as Python ints, one shared object per id (a cache of immutable values, the same for
# every pool): block tables and the prefix index's slots hold an id per page, millions of them
# at hundreds of nodes, and a fresh int from `tolist()` costs 32 bytes each. An object array:
# `_PAGE_IDS[pages].tolist()` hands out the shared ints in one C pass (3x a list's lookups).
_PAGE_IDS = np.zeros(0, dtype=object)
# allocate / allocate_at take up to this many pages with scalar reads and writes (numpy's
# per-call cost exceeds a few scalar ones), more in one numpy pass.
ALLOCATE_AT_SCALAR_MAX = 8


def page_ids(pages: np.ndarray) -> list[int]:
    """`pages.tolist()`, each id as its shared int object."""
    return _PAGE_IDS[pages].tolist()


def _share_page_ids(num_pages: int) -> None:
    """Ids 0 .. num_pages - 1 get their shared objects (those handed out already are kept)."""
    global _PAGE_IDS
    have = _PAGE_IDS.shape[0]
    if num_pages > have:
        _PAGE_IDS = np.concatenate([_PAGE_IDS, np.array(range(have, num_pages), dtype=object)])


class PagePool:
    def __init__(
        self,
        num_pages: int,
        page_size: int,
        page_bytes: int,
        epoch_reclaim: bool = True,
        race_window_s: float = 0.0,
    ):
        assert num_pages > 0 and race_window_s >= 0
        _share_page_ids(num_pages)
        self.num_pages = num_pages
        self.page_size = page_size
        self.page_bytes = page_bytes
        self.epoch_reclaim = epoch_reclaim
        self.race_window_s = race_window_s
        self.ref_count = np.zeros(num_pages, dtype=np.int32)
        self.state = np.zeros(num_pages, dtype=np.int8)  # PageState
        self.read_until_s = np.full(num_pages, -np.inf)  # when the page's last reader exits
        # int32, 4 bytes a page less each at hundreds of nodes: page ids, and epochs (batch steps:
        # 2**31 of them is months of simulated time; numpy refuses a larger epoch, never wraps it)
        self.release_epoch = np.zeros(num_pages, dtype=np.int32)  # epoch its count last hit zero
        # FIFO free list: ring[head : head+count]; page ids fit 16 bits in a pool of <= 65,536
        ring_type = np.uint16 if num_pages <= 1 << 16 else np.int32
        self._ring = np.arange(num_pages, dtype=ring_type)
        self._head = 0
        self.num_free = num_pages
        self.epochs = Epochs()
        self._retired: deque[tuple[int, np.ndarray]] = (
            deque()
        )  # (retire epoch, pages), oldest first
        self.num_used = 0
        self.num_cached = 0
        self.num_retired = 0
        self.peak_retired = 0
        self.use_after_free = 0
        # An upper bound of read_until_s (the latest any page is read): a page handed out at or
        # after it cannot be a use-after-free, so allocations skip the per-page check.
        self.read_until_max = -np.inf

    # -- queries ---------------------------------------------------------------------------
    def free_pages(self) -> np.ndarray:
        """int32 [num_free]: the free list, oldest first."""
        return self._ring[(self._head + np.arange(self.num_free)) % self.num_pages]

    def check_invariants(self) -> None:
        """Pages conserved; counts never negative; state agrees with counts and lists."""
        assert self.num_free + self.num_used + self.num_cached + self.num_retired == self.num_pages
        assert (self.ref_count >= 0).all()
        used = self.state == USED
        assert (self.ref_count[used] > 0).all() and (self.ref_count[~used] == 0).all()
        assert int(used.sum()) == self.num_used
        assert int((self.state == CACHED).sum()) == self.num_cached
        free = self.free_pages()
        assert np.unique(free).size == free.size and (self.state[free] == FREE).all()
        assert int((self.state == FREE).sum()) == self.num_free
        assert sum(p.size for _, p in self._retired) == self.num_retired
        assert int((self.state == RETIRED).sum()) == self.num_retired

    # -- allocation ------------------------------------------------------------------------
    def allocate(self, n: int, now: float) -> list[int]:
        """Take the n oldest free pages (caller checked num_free); each starts with one reference."""
        assert 0 <= n <= self.num_free, "allocate() without enough free pages"
        if n <= ALLOCATE_AT_SCALAR_MAX:  # a decode's next page, a short chunk's: scalar
            return self.allocate_at([now] * n)[0]
        pages = self._ring_slice(self._head, n)
        self._head = (self._head + n) % self.num_pages
        self.num_free -= n
        if now < self.read_until_max:
            self.use_after_free += int(np.count_nonzero(self.read_until_s[pages] > now))
        self.ref_count[pages] = 1
        self.state[pages] = USED
        self.num_used += n
        return page_ids(pages)

    def allocate_at(self, nows: list[float]) -> tuple[list[int], list[bool]]:
        """`allocate(1, now)` once per entry of `nows`, in order: the pages taken and, per page,
        whether a reader of its old owner still ran (use-after-free). A decode span's sync takes
        a few pages: scalar reads and writes then, one numpy pass for many (the same result)."""
        n = len(nows)
        pages = self.take(n)
        if n and min(nows) < self.read_until_max:  # else no page can be unsafe
            read_until = self.read_until_s
            if n > ALLOCATE_AT_SCALAR_MAX:
                unsafe = (read_until[np.asarray(pages)] > np.array(nows)).tolist()
            else:
                unsafe = [bool(read_until[p] > now) for p, now in zip(pages, nows, strict=True)]
            self.use_after_free += sum(unsafe)
        else:
            unsafe = [False] * n
        return pages, unsafe

    def take(self, n: int) -> list[int]:
        """The n oldest free pages, each with one reference, without the use-after-free test:
        `allocate_at` with it, or at or after `read_until_max` (no old reader still runs)."""
        assert n <= self.num_free, "take() without enough free pages"
        head, num_pages = self._head, self.num_pages
        arr = self._ring_slice(head, n)
        pages = page_ids(arr)
        if n > ALLOCATE_AT_SCALAR_MAX:
            self.ref_count[arr] = 1
            self.state[arr] = USED
        else:
            ref_count, state = self.ref_count, self.state
            for page in pages:
                ref_count[page] = 1
                state[page] = USED
        self._head = (head + n) % num_pages
        self.num_free -= n
        self.num_used += n
        return pages

    def ref_many(self, pages: list[int]) -> None:
        """Add a reference to each of `pages` (distinct, USED or CACHED): a cache hit."""
        arr = np.asarray(pages, dtype=np.int64)
        state = self.state[arr]
        assert ((state == USED) | (state == CACHED)).all(), (
            "ref of a page that is neither used nor cached"
        )
        revived = int((state == CACHED).sum())
        self.state[arr] = USED
        self.num_cached -= revived
        self.num_used += revived
        self.ref_count[arr] += 1

    def unref_many(
        self, pages: list[int] | np.ndarray, indexed: np.ndarray, last_read_s: float = -np.inf
    ) -> np.ndarray:
        """Drop one reference from each of `pages` (distinct), last read by a step ending at last_read_s.

        At zero a page stays CACHED if indexed, else it is released. Returns the pages that hit zero
        (`pages` itself, as an array, when all of them did: a request's own pages, none shared).
        """
        arr = np.asarray(pages, dtype=np.int64)
        counts = self.ref_count[arr] - 1  # pages are distinct: gather, change, scatter is exact
        # (count_nonzero: a C call; ndarray.any() goes through a Python wrapper, ~1 us more)
        if np.count_nonzero(counts):  # some pages keep a reader (shared prefix pages)
            assert counts.min() >= 0, "reference count would go negative"
            zero = arr[counts == 0]
        else:
            zero = arr
        self.ref_count[arr] = counts
        if last_read_s > -np.inf:
            until = last_read_s + self.race_window_s
            if until >= self.read_until_max:  # no page is read later: each maximum is `until`
                self.read_until_s[arr] = until
                self.read_until_max = until
            else:
                self.read_until_s[arr] = np.maximum(self.read_until_s[arr], until)
        if zero.size:
            self.num_used -= int(zero.size)
            self.release_epoch[zero] = self.epochs.epoch
            keep = indexed[zero]
            released = zero
            if np.count_nonzero(keep):  # indexed pages stay cached
                cached = zero[keep]
                self.state[cached] = CACHED
                self.num_cached += int(cached.size)
                released = zero[~keep]
            if released.size:
                self._release(released, self.epochs.epoch)
        return zero

    def evict_many(self, pages: np.ndarray, now: float) -> None:
        """Drop unreferenced cached pages (already unindexed by the prefix cache).

        Immediate: free at once. Epoch: free unless a reader of their last use may still run.
        """
        assert (self.state[pages] == CACHED).all()
        self.num_cached -= int(pages.size)
        if not self.epoch_reclaim:
            self._push_free(pages)
            return
        safe = self.epochs.safe(self.release_epoch[pages], now)
        self._push_free(pages[safe])
        if not safe.all():
            self._release(pages[~safe], self.epochs.epoch)

    # -- reclamation -----------------------------------------------------------------------
    def end_epoch(self, now: float) -> int:
        """A batch step finished at `now`: open a new epoch; return retired pages now safe to reuse."""
        self.epochs.finish_step(now + self.race_window_s)
        return self._reclaim(now, whole_step=True)

    def end_epochs(self, ends: list[float]) -> None:
        """`end_epoch` at each of these times, in order, while nothing is retired (nothing to
        reclaim): only the epochs advance."""
        assert not self._retired, "end_epochs() with retired pages"
        race = self.race_window_s
        self.epochs.finish_steps([now + race for now in ends] if race else ends)  # x + 0.0 == x

    def returns_all_at(self, end_s: float) -> bool:
        """Would `end_epoch(end_s)`, for the next step to end, put every retired page back on
        the free list? Each was retired in an epoch before that step's; the readers of the
        last (and so of every earlier one) must have exited by then."""
        return not self._retired or self.epochs.exit_s(self._retired[-1][0]) <= end_s

    def reclaim_exited(self, now: float) -> int:
        """Memory is short: free retired pages whose readers have all exited, without waiting for
        the next step to end. Returns how many."""
        return self._reclaim(now, whole_step=False)

    def idle_reclaim(self, now: float) -> float | None:
        """No step is in flight: free what no reader holds.

        0.0 if pages were freed (retry now), else seconds until the next retired batch's readers
        exit, or None when nothing is retired.
        """
        if self._reclaim(now, whole_step=False):
            return 0.0
        if not self._retired:
            return None
        return self.epochs.exit_s(self._retired[0][0]) - now

    def _reclaim(self, now: float, whole_step: bool) -> int:
        freed = 0
        while self._retired:
            epoch, pages = self._retired[0]
            if whole_step and epoch >= self.epochs.epoch or self.epochs.exit_s(epoch) > now:
                break
            self._retired.popleft()
            self.num_retired -= int(pages.size)
            self._push_free(pages)
            freed += int(pages.size)
        return freed

    def _release(self, pages: np.ndarray, epoch: int) -> None:
        if not self.epoch_reclaim:
            self._push_free(pages)
            return
        self.state[pages] = RETIRED
        self._retired.append((epoch, pages))
        self.num_retired += int(pages.size)
        self.peak_retired = max(self.peak_retired, self.num_retired)

    def _push_free(self, pages: np.ndarray) -> None:
        n = int(pages.size)
        if n == 0:
            return
        self.state[pages] = FREE
        tail = (self._head + self.num_free) % self.num_pages
        if tail + n <= self.num_pages:  # no wrap: a slice
            self._ring[tail : tail + n] = pages
        else:
            self._ring[(tail + np.arange(n)) % self.num_pages] = pages
        self.num_free += n

    def _ring_slice(self, start: int, n: int) -> np.ndarray:
        """[n] page ids: the ring's entries start, start + 1, ... (wrapping); a view when they do
        not wrap (read at once, before the ring changes)."""
        if start + n <= self.num_pages:
            return self._ring[start : start + n]
        return self._ring[(start + np.arange(n)) % self.num_pages]
