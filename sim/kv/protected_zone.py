"""The protected zone (the article's 4.2): core prefixes that stay resident, never evicted.

A page is in the zone while at least `share` of the node's last `window` requests reused it (a
cache hit at first admission; the share is counted over the whole window, so a zone forms only
after share x window such requests). Reuse counts only grow along a root path (a hit on a page is
a hit on its whole prefix), so the zone is a set of whole prefixes. Its size is capped at
`max_pages`: past the cap the most reused pages stay protected, heads of prefixes before tails,
so the zone can never starve the pool.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np


class ProtectedZone:
    def __init__(self, num_pages: int, share: float, window: int, max_pages: int):
        assert 0 < share <= 1 and window > 0 and max_pages >= 0
        self.window = window
        self.max_pages = max_pages
        self.min_count = max(1, math.ceil(share * window - 1e-9))  # requests needed in the window
        # window requests that reused the page: at most `window`, so 16 bits where that fits
        # (0.07 MB a 34,800-page node less)
        narrow = window <= np.iinfo(np.int16).max
        self.counts: np.ndarray = np.zeros(num_pages, dtype=np.int16 if narrow else np.int32)
        self.generation = np.zeros(num_pages, dtype=np.int32)  # bumped when a page leaves the index
        self._recent: deque[tuple[np.ndarray, np.ndarray]] = deque()  # (pages, their generations)
        self.num_hot = 0  # pages at min_count or more: none (the usual case) skips the pool scan

    def on_request(self, pages: list[int]) -> None:
        """A request was admitted and reused `pages` (possibly none: it still counts in the window)."""
        arr = np.asarray(pages, dtype=np.int32)  # kept for the window: page ids fit int32
        self.counts[arr] += 1
        self.num_hot += int(np.count_nonzero(self.counts[arr] == self.min_count))
        self._recent.append((arr, self.generation[arr]))
        if len(self._recent) > self.window:
            old, gen = self._recent.popleft()
            still = old[self.generation[old] == gen]  # pages re-indexed since are new content
            self.num_hot -= int(np.count_nonzero(self.counts[still] == self.min_count))
            self.counts[still] -= 1

    def on_removed(self, pages: np.ndarray) -> None:
        """Pages left the index: their counts belong to content that is gone."""
        if self.num_hot:
            self.num_hot -= int(np.count_nonzero(self.counts[pages] >= self.min_count))
        self.counts[pages] = 0
        self.generation[pages] += 1

    def pages(self, depth: np.ndarray) -> np.ndarray:
        """int64: the protected pages now (most reused first, then shallower, then lower id)."""
        if self.num_hot == 0:
            return np.zeros(0, dtype=np.int64)
        hot = np.flatnonzero(self.counts >= self.min_count)
        if hot.size > self.max_pages:
            order = np.lexsort((hot, depth[hot], -self.counts[hot]))
            hot = hot[order[: self.max_pages]]
        return hot
