"""The prefix index's level 1: chained page key -> the page holding its slot.

Two implementations answer alike (tests/sim/test_page_slots.py runs both against a dict):

- `TableSlots`, with the native build (sim/native.py): open addressing (linear probing from the
  key's low bits; keys are well-mixed hashes) in one array of pages (uint16 for a pool of fewer
  than 65,535 pages, else int32), walked in C (sim/_slots.c); a slot's key is its page's entry
  in the index's page keys, which a claim writes. 2 or 4 bytes a slot at most 70% full, against
  ~76 bytes a key in a dict (at 256 nodes the level 1s hold ~9M keys) and 12 with a copy of the
  key in each slot. A page holds at most one
  slot (the index claims only pages it has not indexed; the table refuses any other).
- `DictSlots`, without it: a dict, with the same batch methods.

A removal closes up its cluster (backward-shift deletion, in C), so the table holds live keys
only: it grows (every key placed again in the smallest power of two they fill at most 70% of)
only when its live keys would pass 70%, and a level 1, which never holds more keys than its
pool has pages, stays at that bound's table: 65,536 slots for a 34,800-page pool, where leaving
tombstones and rebuilding for 50% live keys had grown it to 131,072 (0.8 MB a node more).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping

import numpy as np

from sim import native

_C = native.c_extension("sim._slots")

EMPTY = -1  # a vacant slot's page code in an int32 table (a page id is >= 0) ...
NARROW_EMPTY = 0xFFFF  # ... and in a uint16 one
_MAX_FILL = 0.7
_MIN_SLOTS = 16


class DictSlots(dict[int, int]):
    """Level 1 as a dict: `claim` is setdefault and `pop_many` pop, key by key (C-level maps)."""

    def claim(self, keys: list[int], pages: list[int]) -> list[int]:
        """dict.setdefault(key, page) of each pair in turn: each key's holder after it."""
        return list(map(self.setdefault, keys, pages))

    def pop_many(self, keys: list[int]) -> list[int]:
        """The page each key held, removed (-1 for a key absent), in turn."""
        pop = self.pop
        return [pop(key, -1) for key in keys]

    def run(self, keys: list[int]) -> list[int]:
        """The pages of the leading keys held, up to the first key absent."""
        lookup, out = self.get, []
        for key in keys:
            page = lookup(key)
            if page is None:
                break
            out.append(page)
        return out


class TableSlots(Mapping[int, int]):
    """Level 1 in an array of pages probed in C (the module docstring); a dict's answers.

    page_keys: uint64, one per page of the pool: the index's own, which `claim` writes (a
    placed page's entry becomes its key) and which the index must not change while the page
    holds its slot (it links only pages it has not indexed)."""

    def __init__(self, page_keys: np.ndarray) -> None:
        assert _C is not None, "TableSlots needs the native build"
        assert page_keys.dtype == np.uint64 and page_keys.ndim == 1
        self._key_of = page_keys
        self._num_live = 0
        # 2 bytes a slot where page ids and EMPTY fit (0.13 MB a 34,800-page node less)
        narrow = page_keys.size < NARROW_EMPTY
        self._slot_type: type[np.integer] = np.uint16 if narrow else np.int32
        self._empty = NARROW_EMPTY if narrow else EMPTY
        self._use(self._empty_slots(_MIN_SLOTS))

    def _use(self, pages: np.ndarray) -> None:
        self._pages = pages
        self._mask = pages.size - 1
        self._max_filled = int(_MAX_FILL * pages.size)

    def _empty_slots(self, num_slots: int) -> np.ndarray:
        return np.full(num_slots, self._empty, dtype=self._slot_type)

    @property
    def filled(self) -> np.ndarray:
        """bool per slot: it holds a page."""
        return self._pages != self._empty

    @property
    def _keys(self) -> np.ndarray:
        """uint64 per slot: the key of each filled slot's page (0 where a slot is empty)."""
        filled = self.filled
        return np.where(filled, self._key_of[np.where(filled, self._pages, 0)], np.uint64(0))

    # -- reads ---------------------------------------------------------------------------------
    def get(self, key: int, default: int | None = None) -> int | None:  # type: ignore[override]
        page = self._page_of(key)
        return default if page < 0 else page

    def __contains__(self, key: object) -> bool:
        return self._page_of(key) >= 0

    def _page_of(self, key: object) -> int:
        """The key's page, or -1 (a key no int equals, as a dict of int keys finds nothing)."""
        try:
            key = operator.index(key)  # type: ignore[arg-type]
        except TypeError:
            return -1
        return _C.get(self._key_of, self._pages, self._mask, key)

    def __getitem__(self, key: int) -> int:
        page = self._page_of(key)
        if page < 0:
            raise KeyError(key)
        return page

    def __len__(self) -> int:
        return self._num_live

    def __iter__(self) -> Iterator[int]:
        return iter(self._key_of[self._pages[self.filled]].tolist())

    def run(self, keys: list[int]) -> list[int]:
        return _C.run(self._key_of, self._pages, self._mask, keys)

    # -- updates -------------------------------------------------------------------------------
    def claim(self, keys: list[int], pages: list[int]) -> list[int]:
        if self._num_live + len(keys) > self._max_filled:
            self._grow(len(keys))
        try:
            holders, placed = _C.claim(self._key_of, self._pages, self._mask, keys, pages)
        except Exception:  # (out of memory part way) slots placed before it stay: count them again
            self._recount()
            raise
        self._num_live += placed
        return holders

    def setdefault(self, key: int, page: int) -> int:
        return self.claim([key], [page])[0]

    def pop_many(self, keys: list[int]) -> list[int]:
        try:
            popped = _C.pop(self._key_of, self._pages, self._mask, keys)
        except Exception:
            self._recount()
            raise
        self._num_live -= len(popped) - popped.count(-1)
        return popped

    def __delitem__(self, key: int) -> None:
        if self.pop_many([key])[0] < 0:
            raise KeyError(key)

    def _recount(self) -> None:
        self._num_live = int(np.count_nonzero(self.filled))

    def _grow(self, incoming: int) -> None:
        """Every key placed again, in the smallest table they and `incoming` more fill at most
        70% of."""
        target = _MIN_SLOTS
        while self._num_live + incoming > _MAX_FILL * target:
            target *= 2
        live = self._pages[self.filled]
        keys, pages = self._key_of[live].tolist(), live.tolist()
        new_pages = self._empty_slots(target)
        # (each page's key entry is written again with the key it has)
        _, placed = _C.claim(self._key_of, new_pages, target - 1, keys, pages)
        # swapped in only once every key is placed: a failure leaves the old table whole
        self._use(new_pages)
        self._num_live = placed


def new_page_slots(page_keys: np.ndarray, compiled: bool = True) -> DictSlots | TableSlots:
    """Level 1 for one index (`page_keys`: its uint64 page keys, one per page): an array probed
    in C with the native build, else a dict."""
    return TableSlots(page_keys) if compiled and _C is not None else DictSlots()
