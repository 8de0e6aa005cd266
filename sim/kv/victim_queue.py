"""Eviction queue: the next victims in order, for a policy whose priorities time does not move.

With lru, lfu and fifo a cached page's priority is a statistic (last access, hit count, creation
time) that only changes while a request holds the page: as long as it stays cached, its
priority, and so its place in the eviction order (lowest priority first, then deeper pages,
then lower ids), stays as it was. A full round therefore ranks, besides its own victims, the
`reserve` next lowest evictable pages in that order (the queue) and notes the highest priority
queued (`top`): every evictable page left out scored above it. The next rounds take their
victims from the front of the queue, skipping the pages that are no longer there as ranked
(held again, evicted with a parent, in the protected zone, or released again with another
priority), without looking at the rest of the pool, as long as every page that may have become
evictable since (released, out of the zone, its readers exited) scores above `top`: then no
page outside the queue can come before a queued one, and the rounds evict the same pages, in
the same order, as ranking every evictable page each time. Otherwise, or once the queue runs
out, the round is a full one and the queue starts again.
"""

from __future__ import annotations

import numpy as np

from sim.kv.shortlist import CarriedRound

QUEUE_PAGES = 2048  # pages a full round queues beyond its victims


class VictimQueue(CarriedRound):
    def __init__(self, reserve: int = QUEUE_PAGES):
        super().__init__(reserve)  # pages: in eviction order
        self.priority = np.zeros(0)  # each queued page's priority and depth as ranked
        self.depth = np.zeros(0, dtype=np.int32)
        self.head = 0  # pages[:head] are gone (evicted, or no longer there as ranked)
        self.top = np.inf  # every evictable page not queued scored above it

    def restart(
        self,
        pages: np.ndarray,
        priority: np.ndarray,
        depth: np.ndarray,
        top: float,
        waiting: np.ndarray,
        zone: np.ndarray,
    ) -> None:
        """After a full round: `pages` (in eviction order, with their priorities and depths)
        are every evictable page scoring at most `top`; the others score above it."""
        self.pages, self.priority, self.depth = pages, priority, depth
        self.head, self.top = 0, top
        self._carry(waiting, zone)

    def take_fresh(self, zone: np.ndarray) -> np.ndarray:
        """int64: the pages that may have become evictable since the last round (repeats
        possible): released, still read then (epoch), or out of the protected zone."""
        return self._since(zone)

    def window(self, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The next `size` queued pages (fewer at the end), their priorities and depths."""
        assert self.pages is not None
        end = self.head + size
        return (
            self.pages[self.head : end],
            self.priority[self.head : end],
            self.depth[self.head : end],
        )

    def remaining(self) -> int:
        return 0 if self.pages is None else self.pages.size - self.head
