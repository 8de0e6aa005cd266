"""Eviction shortlist: the pages a round must score, carried from one round to the next.

A full eviction round scores every evictable page, though a round evicts only the few lowest
and most pages stay far from eviction for many rounds. After a full round the cache keeps the
`reserve` lowest pages (the shortlist) and the priority they end at (`bound`): every evictable
page left out scored at least `bound`. Until something changes that, a round scores only the
shortlist plus the pages that may have joined since: pages that became cached (released by
their last request), cached pages whose readers have exited since (epoch reclamation), pages
out of the protected zone again. A cached page's statistics never lower its priority while it
stays cached (hits and new tokens only come to pages a request holds), so a page left out can
only fall by what time does to it, which the policy bounds (`DriftBoundedEviction`). If the k-th
lowest priority of the pages scored is below that bound, no page left out can be among the k
lowest or tie with the k-th: the round evicts the same pages, in the same order, as a full one.
Otherwise the round is a full one and the shortlist starts again.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

RESERVE_PAGES = 2048  # pages kept beyond a round's victims
# A bound is trusted only with this relative slack: priorities are computed in floating point.
BOUND_SLACK = 1e-9


@runtime_checkable
class DriftBoundedEviction(Protocol):
    """An eviction policy that bounds how far time can lower a priority (optional)."""

    def lowest_later(self, priority: float, floor: float, elapsed_s: float) -> float:
        """<= the priority, `elapsed_s` later, of any page whose priority is >= `priority` now,
        whose priority floor (`FlooredEviction`; -inf without one) is >= `floor`, and whose
        statistics do not change meanwhile. Having it also promises that a page's priority
        depends only on its own statistics and does not fall as its prefix_pages grows."""
        ...


class CarriedRound:
    """What a full eviction round carries to the next ones (the shortlist's, the victim
    queue's): its pages (None: the next round is a full one) and the pages that may have become
    evictable since it: cached since, still read then (epoch), or out of the protected zone."""

    def __init__(self, reserve: int):
        self.reserve = reserve
        self.pages: np.ndarray | None = None
        self._joined: list[np.ndarray] = []  # pages that became cached since the last round
        self._num_joined = 0
        self.waiting = np.zeros(0, dtype=np.int64)  # cached, readers may still run (epoch)
        self._zone = np.zeros(0, dtype=np.int64)  # the protected zone at the last round

    def _carry(self, waiting: np.ndarray, zone: np.ndarray) -> None:
        """A full round's state: nothing joined since; its waiting pages and zone."""
        self._joined, self._num_joined = [], 0
        self.waiting, self._zone = waiting, zone

    def on_cached(self, pages: np.ndarray) -> None:
        """These pages lost their last reference (the cached ones may be evicted now)."""
        if self.pages is None or pages.size == 0:
            return
        self._joined.append(pages)
        self._num_joined += int(pages.size)
        if self._num_joined > 8 * self.reserve:  # no round for a while: start again then
            self.pages = None

    def _since(self, zone: np.ndarray, *first: np.ndarray) -> np.ndarray:
        """int64: `first`, then the pages that may have become evictable since the last round
        (repeats possible); `zone` is the protected zone now."""
        parts = [*first, self.waiting, *self._joined]
        if self._zone.size:
            parts.append(np.setdiff1d(self._zone, zone, assume_unique=True))  # left the zone
        self._joined, self._num_joined, self._zone = [], 0, zone
        return np.concatenate(parts)


class Shortlist(CarriedRound):
    def __init__(self, policy: DriftBoundedEviction, reserve: int = RESERVE_PAGES):
        super().__init__(reserve)
        self.policy = policy
        self._bound = np.inf  # every evictable page left out scored >= it ...
        self._bound_s = 0.0  # ... at this time ...
        self.floor = -np.inf  # ... and has a priority floor >= this one

    def restart(
        self,
        pages: np.ndarray,
        priority: np.ndarray,
        bound: float,
        floor: float,
        now: float,
        waiting: np.ndarray,
        zone: np.ndarray,
    ) -> None:
        """After a full round: `pages` (with their priorities) are every evictable page that
        scored below or at `bound`; the others scored above it, with floors >= `floor`."""
        if np.isnan(priority).any() or np.isnan(floor):  # no bound holds: full rounds
            self.pages = None
            return
        self.pages, self._bound, self._bound_s, self.floor = pages, bound, now, floor
        self._carry(waiting, zone)

    def to_score(self, zone: np.ndarray) -> np.ndarray:
        """int64: the pages that may be evictable and among the lowest now (repeats possible;
        the caller keeps the evictable ones)."""
        assert self.pages is not None
        return self._since(zone, self.pages)

    def bound_at(self, now: float) -> float:
        """A lower bound, now, on the priority of every evictable page left out."""
        if not np.isfinite(self._bound):
            return self._bound
        return self.policy.lowest_later(self._bound, self.floor, now - self._bound_s)

    def keep(self, pages: np.ndarray, waiting: np.ndarray) -> None:
        """After a shortlisted round: the pages that may fall under the bound stay (the
        others scored above it with a floor >= its floor, as the pages left out did)."""
        self.pages, self.waiting = pages, waiting


def distinct(pages: np.ndarray) -> np.ndarray:
    """Positions of the distinct pages (the first of each), ascending by page. A sort:
    np.unique's hash table costs more on a few thousand ids."""
    order = np.argsort(pages, kind="stable")
    sorted_pages = pages[order]
    first = np.empty(pages.size, dtype=bool)
    first[:1] = True
    np.not_equal(sorted_pages[1:], sorted_pages[:-1], out=first[1:])
    return order[first]


def below(bound: float) -> float:
    """`bound` less its floating-point slack: priorities strictly under it are under the bound."""
    return bound - BOUND_SLACK * abs(bound) if np.isfinite(bound) else bound
