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

The shortlist is kept in groups of pages with equal statistics (those the policy `reads`): a
released request's own pages share their last access, hit count and prefix length, so a few
groups hold thousands of pages. A priority depends only on a page's statistics, so a round
scores each group once (one entry each), and the lowest groups give their victims from their
heads: each group keeps its pages in eviction order (deeper first, then lower id). A page held
again or evicted leaves its group (`unlist`); one released again joins a new group.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from sim.kv.views import PageStats

# Pages kept beyond a round's victims. A round scores the shortlist's groups (a few to a few
# tens), not its pages, so a longer one costs little more a round, and a full round (a mask,
# floors and a partition over the whole pool: ~2 ms at 34,800 pages) comes once the reserve is
# used up: 484 of the default engine arm's ~8,700 rounds with 2,048 pages, 19 with 16,384.
RESERVE_PAGES = 16384
# Pages released since the last round past which the next round is a full one (their list
# would otherwise grow while no round comes): 8 reserves, at most this many
MAX_JOINED_PAGES = 16384
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

    def carried(self) -> bool:
        """Does the next round start from a full round's state (False: it is a full one)?"""
        return self.pages is not None

    def on_cached(self, pages: np.ndarray) -> None:
        """These pages lost their last reference (the cached ones may be evicted now)."""
        if pages.size == 0 or not self.carried():
            return
        self._joined.append(pages)
        self._num_joined += int(pages.size)
        if self._num_joined > min(8 * self.reserve, MAX_JOINED_PAGES):  # no round for a while
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
    """The shortlist in groups of pages with equal statistics. A policy's priority reads only a
    page's own statistics (`DriftBoundedEviction`; those it names in `reads`, else any but
    depth), so every page of a group has the same priority at every time and a round scores
    each group once. A group keeps its pages in eviction order (deeper first, then lower id):
    a round takes its victims from the heads of the lowest groups. A page evictable now is
    still as its group has it unless it was released since (it then joins with its new
    statistics; its old entry would be stale: the round is a full one instead), or its
    prefix_pages was raised, which the round checks on the pages it takes."""

    def __init__(self, policy: DriftBoundedEviction, reserve: int = RESERVE_PAGES):
        super().__init__(reserve)
        self.policy = policy
        self.fields: tuple[str, ...] = getattr(policy, "reads", GROUP_FIELDS)
        self._bound = np.inf  # every evictable page left out scored >= it ...
        self._bound_s = 0.0  # ... at this time ...
        self.floor = -np.inf  # ... and has a priority floor >= this one
        self.groups: list[Group] | None = None  # None: the next round is a full one
        self.values: list[np.ndarray] = []  # the groups' statistics, field by field
        # per page of the pool: the id of the group listing it (-1: none); a group may still
        # hold a page it no longer lists (held or evicted since: dropped when met)
        self.owner = np.zeros(0, dtype=np.int32)
        self._next_id = 0
        self._stats: PageStats | None = None  # (built from `values` when asked)
        self._page_size = 0

    def carried(self) -> bool:
        """`CarriedRound.carried`, read from the groups (`pages` would concatenate every
        group's pages, on every release)."""
        return self.groups is not None

    @property
    def pages(self) -> np.ndarray | None:
        """The pages listed (None: the next round is a full one)."""
        if self.groups is None:
            return None
        return np.concatenate([np.zeros(0, dtype=np.int64)] + [g.rest() for g in self.groups])

    @pages.setter
    def pages(self, pages: np.ndarray | None) -> None:
        assert pages is None, "a shortlist is set by restart"
        self.groups = None

    def restart(
        self,
        pages: np.ndarray,
        priority: np.ndarray,
        bound: float,
        floor: float,
        now: float,
        waiting: np.ndarray,
        zone: np.ndarray,
        stats: PageStats,
    ) -> None:
        """After a full round: `pages` (with their priorities) are every evictable page that
        scored below or at `bound`; the others scored above it, with floors >= `floor`."""
        if np.isnan(priority).any() or np.isnan(floor):  # no bound holds: full rounds
            self.groups = None
            return
        if self.owner.size != stats.depth.size:
            self.owner = np.empty(stats.depth.size, dtype=np.int32)
        self.owner[:] = -1
        self._next_id, self._page_size = 0, stats.page_size
        self._bound, self._bound_s, self.floor = bound, now, floor
        self.groups, self.values = [], [np.zeros(0, dtype=a.dtype) for a in self._of(stats)]
        self._carry(waiting, zone)
        self.add(pages, stats)

    def _of(self, stats: PageStats) -> list[np.ndarray]:
        return [getattr(stats, name) for name in self.fields]

    def fresh(self, zone: np.ndarray) -> np.ndarray:
        """int64: the pages that may have become evictable since the last round (repeats
        possible; the caller keeps the evictable ones)."""
        return self._since(zone)

    def bound_at(self, now: float) -> float:
        """A lower bound, now, on the priority of every evictable page left out."""
        if not np.isfinite(self._bound):
            return self._bound
        return self.policy.lowest_later(self._bound, self.floor, now - self._bound_s)

    def add(self, pages: np.ndarray, stats: PageStats) -> None:
        """These evictable pages (distinct, none listed), in new groups."""
        assert self.groups is not None
        if pages.size == 0:
            return
        columns = [a[pages] for a in self._of(stats)]
        if all((c == c[0]).all() for c in columns):  # the usual case: one group
            self._add_group(in_eviction_order(pages, stats.depth), [c[:1] for c in columns])
            return
        order = np.lexsort((pages, -stats.depth[pages], *columns[::-1]))
        pages = pages[order]
        columns = [c[order] for c in columns]
        new = np.zeros(pages.size, dtype=bool)
        new[0] = True
        for c in columns:
            new[1:] |= c[1:] != c[:-1]
        first = np.flatnonzero(new)
        for a, b in zip(first.tolist(), [*first[1:].tolist(), pages.size], strict=True):
            self._add_group(pages[a:b], [c[a : a + 1] for c in columns])

    def _add_group(self, pages: np.ndarray, values: list[np.ndarray]) -> None:
        assert self.groups is not None
        self.groups.append(Group(pages, self._next_id))
        self.owner[pages] = self._next_id
        self._next_id += 1
        self.values = [np.concatenate((v, c)) for v, c in zip(self.values, values, strict=True)]
        self._stats = None

    def stats(self) -> PageStats:
        """The groups' statistics, one entry per group (depth empty: a priority may not read
        it; nor a field it does not name)."""
        if self._stats is None:
            given = dict(zip(self.fields, self.values, strict=True))
            empty = np.zeros(0, dtype=np.int32)
            self._stats = PageStats(
                last_access_s=given.get("last_access_s", np.zeros(0)),
                created_s=given.get("created_s", np.zeros(0)),
                hit_count=given.get("hit_count", empty),
                depth=empty,
                prefix_pages=given.get("prefix_pages", empty),
                page_size=self._page_size,
            )
        return self._stats

    def unlist(self, pages: np.ndarray | list[int]) -> None:
        """These pages are no longer evictable as listed (held again, or evicted)."""
        if self.groups is not None:
            self.owner[pages] = -1

    def listed(self, which: list[int], fronts: list[np.ndarray], pages: np.ndarray) -> bool:
        """Do these groups still list every page of their `fronts` (concatenated: `pages`)?"""
        assert self.groups is not None
        owner = self.owner[pages]
        if len(which) == 1:
            return bool((owner == self.groups[which[0]].id).all())
        ids = np.array([self.groups[i].id for i in which], dtype=np.int32)
        return bool((owner == np.repeat(ids, [f.size for f in fronts])).all())

    def take(self, which: list[int], fronts: list[np.ndarray], victims: np.ndarray) -> None:
        """The victims are gone: the head of each front that they are."""
        assert self.groups is not None
        self.owner[victims] = -1
        if len(which) == 1:  # all of its front
            self.groups[which[0]].head += victims.size
        for i, front in zip(which, fronts, strict=True) if len(which) > 1 else ():
            group = self.groups[i]
            group.head += front.size - int(np.count_nonzero(self.owner[front] == group.id))
        if any(g.size() == 0 for g in self.groups):
            self.drop(np.array([g.size() > 0 for g in self.groups], dtype=bool))

    def compact(self, which: list[int]) -> np.ndarray:
        """Drop the pages no longer listed from these groups; returns the groups kept (bool
        per group: those emptied go)."""
        assert self.groups is not None
        for i in which:
            group = self.groups[i]
            rest = group.rest()
            self.groups[i] = Group(rest[self.owner[rest] == group.id], group.id)
        keep = np.array([g.size() > 0 for g in self.groups], dtype=bool)
        if not keep.all():
            self.drop(keep)
        return keep

    def drop(self, keep: np.ndarray) -> None:
        """Keep only the groups `keep` (bool per group); the others' pages are no longer
        listed."""
        assert self.groups is not None
        for group, kept in zip(self.groups, keep.tolist(), strict=True):
            if not kept and group.size():
                rest = group.rest()
                self.owner[rest[self.owner[rest] == group.id]] = -1
        self.groups = [g for g, kept in zip(self.groups, keep.tolist(), strict=True) if kept]
        self.values = [v[keep] for v in self.values]
        self._stats = None


def in_eviction_order(pages: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Pages of equal priority in eviction order: deeper first, then lower id."""
    depths = depth[pages]
    if (depths[1:] > depths[:-1]).all():  # a chain, head first (as a request releases it)
        return pages[::-1]
    return pages[np.lexsort((pages, -depths))]


class Group:
    """Pages with equal statistics, in eviction order; pages[:head] are gone (evicted)."""

    __slots__ = ("pages", "head", "id")

    def __init__(self, pages: np.ndarray, id: int):
        self.pages = pages
        self.head = 0
        self.id = id

    def size(self) -> int:
        return self.pages.size - self.head

    def rest(self) -> np.ndarray:
        return self.pages[self.head :]

    def front(self, count: int) -> np.ndarray:
        return self.pages[self.head : self.head + count]


# The per-page statistics of a group when a policy does not name those it reads (depth is the
# order inside a group).
GROUP_FIELDS = ("last_access_s", "created_s", "hit_count", "prefix_pages")


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
