"""The level-2 token copy: every indexed page's token ids, exactly, in ~2.1 bytes a token.

A [num_pages, page_size] int32 copy was 2.2 MB of a 34,800-page node (0.57 GB at 256 nodes). But
prompt ids are vocabulary ids, below 2**17 for every model we price, so each id is split: its low
16 bits go to an int16 table, and a page whose ids all lie in [0, 2**17) keeps their 17th bits as
one mask (bit i for token i). A page holding any other id (a generated id, a 31-bit hash; a
negative or wider id from a trace) keeps the high 16 bits of each id in a row of a side table
instead, its mask set to -1 - row. Both forms hold the whole id, so comparisons stay exact.

Which form a page takes depends only on its own ids, so two equal pages take the same one: a
page in mask form never equals ids that need a row, and the other way round.

With the native build (sim/native.py) pages are written and compared in C (sim/_pagetokens.c),
over the same arrays and in the same order as the numpy path here, which takes the same rows;
tests/sim/kv/test_page_tokens.py runs both paths against a plain table.
"""

from __future__ import annotations

import sys

import numpy as np

from sim import native

# The page loops in C, when the native build is in use; else numpy.
_C = native.c_extension("sim._pagetokens")


class PageTokens:
    def __init__(self, num_pages: int, page_size: int, compiled: bool = True):
        if sys.byteorder != "little":  # the halves are read as int16 views of the int32 ids
            raise RuntimeError("PageTokens reads int32 ids as (low, high) int16 pairs")
        self.page_size = page_size
        self.low = np.zeros((num_pages, page_size), dtype=np.int16)
        # one bit a token: int32 holds 31 of them, int64 63; wider pages always take rows
        self._maskable = page_size <= 63
        mask_type = np.int32 if page_size <= 31 else np.int64
        self.mask = np.zeros(num_pages, dtype=mask_type)
        self._bits = (1 << np.arange(min(page_size, 63), dtype=np.int64)).astype(mask_type)
        self.rows = np.zeros((0, page_size), dtype=np.int16)  # high halves of row-form pages
        self._free = np.zeros(0, dtype=np.int32)  # a stack of free rows, the top at the end ...
        self._num_free = np.zeros(1, dtype=np.int64)  # ... of its first _num_free[0] entries
        self._c = _C if compiled else None  # compiled=False: numpy alone (tests compare)

    # -- writes ------------------------------------------------------------------------------
    def write_one(self, page: int, tokens: np.ndarray) -> None:
        """Page `page` now holds `tokens` (int32 [page_size])."""
        if self._c is not None:  # (a generated page: ~80,000 an engine arm, one call each)
            try:
                args = (self.low, self.mask, self.rows, self._free, self._num_free)
                if self._c.write(*args, page, tokens, self.page_size) < 0:
                    return
            except (TypeError, ValueError, BufferError):
                pass  # not int32 ids in one piece: converted below
        self.write(np.array([page], dtype=np.int64), tokens.reshape(1, self.page_size))

    def write(self, pages: np.ndarray, tokens: np.ndarray) -> None:
        """Pages `pages` (distinct) now hold `tokens` (int32 [len(pages), page_size])."""
        ids = np.ascontiguousarray(tokens, dtype=np.int32)
        pages = np.ascontiguousarray(pages, dtype=np.int64)
        if self._c is None:
            for i, page in enumerate(pages.tolist()):
                self._write_numpy(page, ids[i])
            return
        while True:
            args = (self.low, self.mask, self.rows, self._free, self._num_free)
            stopped = self._c.write(*args, pages, ids, self.page_size)
            if stopped < 0:
                return
            self._grow()  # no row was free for pages[stopped]: go on from there
            pages, ids = pages[stopped:], ids[stopped:]

    def _write_numpy(self, page: int, ids: np.ndarray) -> None:
        halves = _halves(ids.reshape(1, self.page_size))[0]
        self.low[page] = halves[:, 0]
        old = int(self.mask[page])
        if old < 0:  # its row is given back
            self._push(-1 - old)
        high = halves[:, 1]
        if self._maskable and int(high.view(np.uint16).max()) <= 1:
            self.mask[page] = int(high @ self._bits)
            return
        if not self._num_free[0]:
            self._grow()
        self._num_free[0] -= 1
        row = int(self._free[self._num_free[0]])
        self.rows[row] = high
        self.mask[page] = -1 - row

    def _push(self, row: int) -> None:
        self._free[self._num_free[0]] = row
        self._num_free[0] += 1

    def _grow(self) -> None:
        """Twice the rows (called when none is free): the new ones free, the lowest on top."""
        assert self._num_free[0] == 0
        size = len(self.rows)
        grown = np.zeros((max(16, 2 * size), self.page_size), dtype=np.int16)
        grown[:size] = self.rows
        self.rows = grown
        self._free = np.zeros(len(grown), dtype=np.int32)
        self._free[: len(grown) - size] = np.arange(len(grown) - 1, size - 1, -1)
        self._num_free[0] = len(grown) - size

    # -- reads -------------------------------------------------------------------------------
    def same(self, pages: np.ndarray, own: np.ndarray) -> np.ndarray:
        """bool [len(pages)]: page pages[i] holds exactly own[i] (int32 [len(pages), page_size])."""
        ids = np.ascontiguousarray(own, dtype=np.int32)
        pages = np.ascontiguousarray(pages, dtype=np.int64)
        if self._c is None:
            return self._same_numpy(pages, ids)
        same = np.empty(len(pages), dtype=bool)
        self._c.same(self.low, self.mask, self.rows, pages, ids, self.page_size, same)
        return same

    def _same_numpy(self, pages: np.ndarray, ids: np.ndarray) -> np.ndarray:
        halves = _halves(ids)
        same = (self.low[pages] == halves[:, :, 0]).all(axis=1)
        masks = self.mask[pages]
        high = halves[:, :, 1]
        if self._maskable and int(high.view(np.uint16).max(initial=0)) <= 1:
            return same & (masks == high @ self._bits)  # the usual case: vocabulary ids
        for i in np.flatnonzero(same).tolist():
            mask = int(masks[i])
            if mask < 0:
                same[i] = np.array_equal(self.rows[-1 - mask], high[i])
            else:  # (a page never written holds zeros in the mask form, whatever its size)
                bits = high[i].view(np.uint16)
                same[i] = int(bits.max()) <= 1 and mask == sum(
                    1 << j for j in np.flatnonzero(bits).tolist()
                )
        return same

    def equal(self, page: int, tokens: np.ndarray) -> bool:
        """Page `page` holds exactly `tokens` (int32 [page_size])."""
        return bool(self.same(np.array([page]), tokens.reshape(1, self.page_size))[0])

    def tokens(self, pages: np.ndarray | int) -> np.ndarray:
        """int32 [..., page_size]: the ids the pages hold (tests and diagnostics)."""
        flat = np.atleast_1d(pages)
        out = np.empty((len(flat), self.page_size), dtype=np.int32)
        halves = out.view(np.int16).reshape(len(flat), self.page_size, 2)
        halves[:, :, 0] = self.low[flat]
        for i, mask in enumerate(self.mask[flat].tolist()):
            if mask >= 0:
                halves[i, :, 1] = (mask >> np.arange(self.page_size)) & 1
            else:
                halves[i, :, 1] = self.rows[-1 - mask]
        return out[0] if np.ndim(pages) == 0 else out

    def rows_in_use(self) -> int:
        return len(self.rows) - int(self._num_free[0])

    @property
    def nbytes(self) -> int:
        return self.low.nbytes + self.mask.nbytes + self.rows.nbytes + self._free.nbytes


def _halves(tokens: np.ndarray) -> np.ndarray:
    """int16 [n, page_size, 2] view: (low 16 bits, high 16 bits) of each int32 id."""
    ids = np.ascontiguousarray(tokens, dtype=np.int32)
    return ids.view(np.int16).reshape(*ids.shape, 2)
