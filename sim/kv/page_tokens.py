"""The level-2 token copy: every indexed page's token ids, exactly, in ~2.1 bytes a token.

A [num_pages, page_size] int32 copy was 2.2 MB of a 34,800-page node (0.57 GB at 256 nodes). But
prompt ids are vocabulary ids, below 2**17 for every model we price, so each id is split: its low
16 bits go to an int16 table, and a page whose ids all lie in [0, 2**17) keeps their 17th bits as
one mask (bit i for token i). A page holding any other id (a generated id, a 31-bit hash; a
negative or wider id from a trace) keeps the high 16 bits of each id in a row of a side table
instead, its mask set to -1 - row. Both forms hold the whole id, so comparisons stay exact.

Which form a page takes depends only on its own ids, so two equal pages take the same one: a
page in mask form never equals ids that need a row, and the other way round.
"""

from __future__ import annotations

import sys

import numpy as np

_VOCAB_BITS = 17  # ids below 2**17 fit the mask form: low 16 bits + one bit


class PageTokens:
    def __init__(self, num_pages: int, page_size: int):
        if sys.byteorder != "little":  # the halves are read as int16 views of the int32 ids
            raise RuntimeError("PageTokens reads int32 ids as (low, high) int16 pairs")
        self.page_size = page_size
        self.low = np.zeros((num_pages, page_size), dtype=np.int16)
        # one bit a token: int32 holds 31 of them, int64 63; wider pages always take rows
        self._maskable = page_size <= 63
        mask_type = np.int32 if page_size <= 31 else np.int64
        self.mask = np.zeros(num_pages, dtype=mask_type)
        self._bits = (1 << np.arange(min(page_size, 63), dtype=np.int64)).astype(mask_type)
        self._rows = np.zeros((0, page_size), dtype=np.int16)  # high halves of row-form pages
        self._free_rows: list[int] = []

    # -- writes ------------------------------------------------------------------------------
    def write_one(self, page: int, tokens: np.ndarray) -> None:
        """Page `page` now holds `tokens` (int32 [page_size])."""
        halves = _halves(tokens.reshape(1, self.page_size))
        self.low[page] = halves[0, :, 0]
        self._release(int(self.mask[page]))
        high = halves[0, :, 1]
        if self._maskable and int(high.view(np.uint16).max()) <= 1:
            self.mask[page] = int(high @ self._bits)
        else:
            self.mask[page] = -1 - self._new_row(high)

    def write(self, pages: np.ndarray, tokens: np.ndarray) -> None:
        """Pages `pages` (distinct) now hold `tokens` (int32 [len(pages), page_size])."""
        halves = _halves(tokens)
        self.low[pages] = halves[:, :, 0]
        old = self.mask[pages]
        if int(old.min(initial=0)) < 0:
            for value in old[old < 0].tolist():
                self._release(value)
        high = halves[:, :, 1]
        if self._maskable and int(high.view(np.uint16).max(initial=0)) <= 1:
            self.mask[pages] = high @ self._bits
            return
        for page, row in zip(pages.tolist(), high, strict=True):
            if self._maskable and int(row.view(np.uint16).max()) <= 1:
                self.mask[page] = int(row @ self._bits)
            else:
                self.mask[page] = -1 - self._new_row(row)

    def _new_row(self, high: np.ndarray) -> int:
        if not self._free_rows:
            grown = np.zeros((max(16, 2 * len(self._rows)), self.page_size), dtype=np.int16)
            grown[: len(self._rows)] = self._rows
            self._free_rows = list(range(len(grown) - 1, len(self._rows) - 1, -1))
            self._rows = grown
        row = self._free_rows.pop()
        self._rows[row] = high
        return row

    def _release(self, mask: int) -> None:
        if mask < 0:
            self._free_rows.append(-1 - mask)

    # -- reads -------------------------------------------------------------------------------
    def same(self, pages: np.ndarray, own: np.ndarray) -> np.ndarray:
        """bool [len(pages)]: page pages[i] holds exactly own[i] (int32 [len(pages), page_size])."""
        halves = _halves(own)
        same = (self.low[pages] == halves[:, :, 0]).all(axis=1)
        masks = self.mask[pages]
        high = halves[:, :, 1]
        if self._maskable and int(high.view(np.uint16).max(initial=0)) <= 1:
            return same & (masks == high @ self._bits)  # the usual case: vocabulary ids
        for i in np.flatnonzero(same).tolist():
            mask = int(masks[i])
            if mask < 0:
                same[i] = np.array_equal(self._rows[-1 - mask], high[i])
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
                halves[i, :, 1] = self._rows[-1 - mask]
        return out[0] if np.ndim(pages) == 0 else out

    @property
    def nbytes(self) -> int:
        return self.low.nbytes + self.mask.nbytes + self._rows.nbytes


def _halves(tokens: np.ndarray) -> np.ndarray:
    """int16 [n, page_size, 2] view: (low 16 bits, high 16 bits) of each int32 id."""
    ids = np.ascontiguousarray(tokens, dtype=np.int32)
    return ids.view(np.int16).reshape(*ids.shape, 2)
