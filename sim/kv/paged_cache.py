"""Paged KV cache of one node: page pool + prefix index + the eviction and admission seams.

Mechanism only. Which unreferenced page goes first is the eviction policy's priority (lower goes
first; ties: deeper pages, then lower ids); whether a request's new segment is indexed for reuse is
the admission policy's call. The cache adds two guards of its own: pages in the protected zone
(sim/kv/protected_zone.py) are never candidates, and with epoch reclamation a page whose last
readers may still run is not evicted (it could not be reused yet anyway). Evicting a page unindexes
its indexed descendants too: no prefix walk can reach them any more. A policy that also gives a
floor under its priorities (`FlooredEviction`) lets a round score only the pages whose floor
leaves them a chance, and one that bounds how time lowers them (sim/kv/shortlist.py) lets most
rounds score only a shortlist carried from the last (the same victims, in the same order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from sim.kv.index_base import ROOT, IndexBase, Match
from sim.kv.page_pool import CACHED, PagePool
from sim.kv.prefix_index import TwoLevelIndex
from sim.kv.protected_zone import ProtectedZone
from sim.kv.radix_index import RadixIndex
from sim.kv.shortlist import GROUP_FIELDS, DriftBoundedEviction, Shortlist, below
from sim.kv.victim_queue import VictimQueue
from sim.kv.views import PageStats, Segment


@runtime_checkable
class FlooredEviction(Protocol):
    """An eviction policy that also bounds its priorities from below (optional)."""

    def priority_floor(self, stats: PageStats, pages: np.ndarray) -> np.ndarray:
        """float64 [len(pages)]: <= priority(stats, pages, now) at every `now`, page by page.
        Having it promises that a page's priority depends only on its own statistics (so
        scoring a subset gives each page the same float as scoring all)."""
        ...


FloorFn = Callable[[PageStats, np.ndarray], np.ndarray]
CacheListener = Callable[[str, list[int], int], None]  # (event "stored"|"removed", page keys, node)
INDEX_KINDS = ("two_level", "hash_only", "radix")
GHOST_KEYS = 4096  # rejected segments remembered for admission on second sight
# _pick ranks this many pages or fewer by one lexsort; past it (ties with the k-th: hundreds to
# thousands of a prefix's pages) by `_pick_tied`, whose fixed cost is higher (measured crossover
# ~900 pages)
PICK_TIED_MIN = 1024
_DEPTH_KEY = 2**31 - 1  # _pick_tied: deeper pages get lower keys (depths are int32)
_PAGE_BITS = 2**32 - 1
_SCRATCH: dict[int, np.ndarray] = {}  # pool size -> int64 scratch shared by the caches


def make_index(kind: str, num_pages: int, page_size: int) -> IndexBase:
    if kind == "radix":
        return RadixIndex(num_pages, page_size)
    assert kind in INDEX_KINDS, kind
    return TwoLevelIndex(num_pages, page_size, verify_tokens=kind == "two_level")


class PagedKVCache:
    def __init__(
        self,
        num_pages: int,
        page_size: int,
        page_bytes: int,
        *,
        eviction,
        admission,
        prefix_cache: bool = True,
        index: str = "two_level",
        epoch_reclaim: bool = True,
        race_window_s: float = 0.0,
        eviction_batch_pages: int = 64,
        protected: ProtectedZone | None = None,
        break_even_tokens: int | None = None,
        node_id: int = 0,
    ):
        self.pool = PagePool(num_pages, page_size, page_bytes, epoch_reclaim, race_window_s)
        self.index = make_index(index, num_pages, page_size)
        self.prefix_cache = prefix_cache
        self.eviction = eviction
        # A floor under the policy's priority lets an eviction round score only the pages that
        # can be among the lowest (`_screen`); policies without one are scored whole.
        self._floor: FloorFn | None = (
            eviction.priority_floor if isinstance(eviction, FlooredEviction) else None
        )
        self._last_bound = -np.inf  # the last screen's bound on the k-th priority (a hint)
        # `_once_each`'s scratch: one array for every cache of this size (written and read
        # within one call; one a cache would cost ~280 KB a node)
        if num_pages not in _SCRATCH:
            _SCRATCH[num_pages] = np.empty(num_pages, dtype=np.int64)
        self._positions = _SCRATCH[num_pages]
        # Carrying a shortlist pays where scoring a page costs more than carrying it: a floored
        # policy (scored); a last-access or count lookup (lru, lfu, fifo) ranks the pool as fast.
        self._shortlist = (
            Shortlist(eviction)
            if isinstance(eviction, DriftBoundedEviction) and self._floor is not None
            else None
        )
        # A policy whose priorities time does not move (lru, lfu, fifo) keeps its next victims
        # queued in order instead (sim/kv/victim_queue.py)
        self._queue = (
            VictimQueue()
            if self._shortlist is None and getattr(eviction, "time_invariant", False)
            else None
        )
        self.admission = admission
        self.eviction_batch_pages = eviction_batch_pages
        self.protected = protected
        self.break_even_tokens = break_even_tokens or page_size
        self.node_id = node_id
        # Creation times are kept only for a policy that reads them (fifo; one that names no
        # `reads` may read any): 0.28 MB a 34,800-page node, 71 MB at 256 nodes, else unread.
        self._keeps_created = "created_s" in getattr(eviction, "reads", GROUP_FIELDS)
        self.stats = PageStats(
            last_access_s=np.zeros(num_pages),
            created_s=np.zeros(num_pages if self._keeps_created else 0),
            hit_count=np.zeros(num_pages, dtype=np.int32),
            depth=self.index.depth,
            prefix_pages=self.index.prefix_pages,
            page_size=page_size,
        )
        self.listeners: list[CacheListener] = []
        self.num_evicted_pages = 0
        # evicted_by_depth[d] = pages evicted at prefix position d (1-based page index in its prefix)
        self.evicted_by_depth = np.zeros(1, dtype=np.int64)
        self.admission_rejected_tokens = 0
        self._ghost: dict[
            int, None
        ] = {}  # first-page keys of recently rejected segments, oldest first

    @property
    def page_size(self) -> int:
        return self.pool.page_size

    # -- prefix reuse ------------------------------------------------------------------------
    def match_prefix(
        self,
        keys: np.ndarray,
        prompt: np.ndarray,
        now: float,
        first_admission: bool = True,
        record: bool = True,
    ) -> Match:
        """Reference the longest cached prefix. At least one prompt token is left to compute.

        record=False only takes the references: a node that may still roll the admission back
        records the hit (`record_hit`) once the request really is admitted.
        """
        if not self.prefix_cache:
            return Match(pages=[])
        max_pages = (prompt.shape[0] - 1) // self.page_size
        match = self.index.match(keys, prompt, max_pages)
        if match.pages:
            self.pool.ref_many(match.pages)
            if self._shortlist is not None:  # held again: no longer evictable as listed
                self._shortlist.unlist(match.pages)
        if record:
            self.record_hit(match.pages, now, first_admission)
        return match

    def record_hit(self, pages: list[int], now: float, first_admission: bool) -> None:
        """What eviction and the protected zone learn from one admitted request's prefix hit."""
        if pages:
            self.stats.last_access_s[pages] = now
            self.stats.hit_count[pages] += 1
        if self.protected is not None and first_admission:
            self.protected.on_request(pages)

    def store_pages(
        self,
        pages: list[int],
        keys: np.ndarray,
        prompt: np.ndarray,
        first: int,
        end: int,
        now: float,
    ) -> None:
        """Index the request's full prompt pages [first, end) once their KV is computed."""
        if not self.prefix_cache or end <= first:
            return
        indexed = self.index.indexed
        while first < end and indexed[pages[first]]:
            first += 1  # already indexed (reused from the cache)
        if first >= end:
            return
        parent = pages[first - 1] if first else ROOT
        if first and not indexed[parent]:
            stand_in = self.index.stand_in(int(keys[first - 1]))
            if stand_in is None:
                return  # the chain is broken (a parent was not indexed): nothing below is reachable
            parent = stand_in
        p = self.page_size
        if end - first == 1:  # a generated page (or a prompt's last): scalar writes
            page = pages[first]
            key = int(keys[first])
            if self.index.insert_page(page, key, parent, prompt[first * p : end * p]):
                if self._keeps_created:
                    self.stats.created_s[page] = now
                self.stats.last_access_s[page] = now
                self.stats.hit_count[page] = 1
                self._emit("stored", [key])
            return
        chunk = pages[first:end]
        chunk_keys = keys[first:end].tolist()
        tokens = prompt[first * p : end * p].reshape(end - first, p)
        placed = self.index.insert_chain(chunk, chunk_keys, parent, tokens)
        if placed:
            if placed == list(range(len(chunk))):  # the usual case: the whole chunk
                new, new_keys = chunk, chunk_keys
            else:
                new, new_keys = [chunk[i] for i in placed], [chunk_keys[i] for i in placed]
            at = np.array(new, dtype=np.int64)  # one conversion for the three writes
            if self._keeps_created:
                self.stats.created_s[at] = now
            self.stats.last_access_s[at] = now
            self.stats.hit_count[at] = 1
            self._emit("stored", new_keys)

    def admit_segment(
        self, new_tokens: int, already_shared: bool, first_key: int | None = None
    ) -> bool:
        """Admission policy: may this request's freshly computed segment enter the cache?

        first_key: the chained key of the segment's first full page (None if it has none). A
        rejected segment leaves it in a small ghost list, so the same segment seen again (a short
        system prompt every request starts with) counts as reused: admission on second sight.
        """
        if not self.prefix_cache:
            return False
        seen = first_key is not None and first_key in self._ghost
        if self.admission.admit(Segment(new_tokens, already_shared, self.break_even_tokens, seen)):
            return True
        self.admission_rejected_tokens += new_tokens
        if first_key is not None and not seen:
            self._ghost[first_key] = None
            if len(self._ghost) > GHOST_KEYS:
                del self._ghost[next(iter(self._ghost))]  # the oldest
        return False

    # -- allocation --------------------------------------------------------------------------
    def takeable_pages(self, now: float) -> int:
        """Pages an allocation could get now: free, plus the cached pages it may evict now (not
        the protected zone, not pages a reader of the race window may still hold)."""
        return self.pool.num_free + int(self._candidates(now, self.protected_pages()).size)

    def available_pages(self) -> int:
        return self.pool.num_free + self.pool.num_cached

    def allocate(self, n: int, now: float) -> list[int] | None:
        """n pages, evicting unreferenced cached pages if needed; None if even that is short."""
        if n > self.pool.num_free and self.pool.num_retired:
            self.pool.reclaim_exited(
                now
            )  # retired pages are garbage: reuse them before cached ones
        if n > self.pool.num_free:
            if n > self.available_pages():
                return None
            self._evict(n - self.pool.num_free, now)
            if n > self.pool.num_free:
                return None  # the rest is protected, or still read by a step (epoch)
        return self.pool.allocate(n, now)

    def release(self, pages: list[int], last_read_s: float = -np.inf) -> None:
        """A request that last read its pages at last_read_s is done: indexed pages stay cached."""
        if not pages:
            return
        arr = np.asarray(pages, dtype=np.int64)
        if last_read_s > -np.inf:  # LRU order = when pages were last used, as vLLM frees tail first
            self.stats.last_access_s[arr] = np.maximum(self.stats.last_access_s[arr], last_read_s)
        zero = self.pool.unref_many(arr, self.index.indexed, last_read_s)
        self.index.prefix.on_released(pages, zero)  # a round may score them now
        if self._shortlist is not None:
            self._shortlist.on_cached(zero)
        if self._queue is not None:
            self._queue.on_cached(zero)

    def end_epoch(self, now: float) -> int:
        return self.pool.end_epoch(now)

    def idle_reclaim(self, now: float) -> float | None:
        """Seconds until memory may come back to an idle node (0: now; None: only new work helps).

        Retired pages return as their readers exit; cached pages released inside the race window
        become evictable at the same moments, so an idle node must wake for those too."""
        waits = [
            w for w in (self.pool.idle_reclaim(now), self._cached_unsafe_wait(now)) if w is not None
        ]
        return min(waits) if waits else None

    def _cached_unsafe_wait(self, now: float) -> float | None:
        if not self.pool.epoch_reclaim:
            return None
        cached = np.flatnonzero(self.pool.state == CACHED)
        epochs = self.pool.release_epoch[cached]
        unsafe = epochs[~self.pool.epochs.safe(epochs, now)]
        if unsafe.size == 0:
            return None
        return max(0.0, self.pool.epochs.exit_s(int(unsafe.min())) - now)

    def protected_pages(self) -> np.ndarray:
        if self.protected is None:
            return np.zeros(0, dtype=np.int64)
        return self.protected.pages(self.index.depth)

    def index_overhead_bytes(self) -> int:
        return self.index.overhead_bytes()

    # -- eviction ----------------------------------------------------------------------------
    def _candidates(self, now: float, zone: np.ndarray) -> np.ndarray:
        """Evictable pages, ascending: cached, outside the protected zone, no reader left (epoch).
        One mask over the pool (no gathers): the same pages as filtering the cached ones."""
        pool = self.pool
        evictable = pool.state == CACHED
        if zone.size:
            evictable[zone] = False
        if pool.epoch_reclaim:
            last_exited = pool.epochs.last_exited(now)
            if last_exited < pool.epochs.epoch:  # else every page was released in an epoch <= it
                evictable &= pool.release_epoch <= last_exited
        return np.flatnonzero(evictable)

    def _evictable(
        self, pages: np.ndarray, zone: np.ndarray, now: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """bool per page: evictable now (as `_candidates` says), and cached but a reader may
        still hold it (epoch)."""
        pool = self.pool
        cached = pool.state[pages] == CACHED
        if zone.size:
            cached &= ~np.isin(pages, zone)
        if pool.epoch_reclaim:
            last_exited = pool.epochs.last_exited(now)
            if last_exited < pool.epochs.epoch:
                safe = pool.release_epoch[pages] <= last_exited
                return cached & safe, cached & ~safe
        return cached, np.zeros(pages.size, dtype=bool)

    def _cached_unsafe(self, now: float) -> np.ndarray:
        """Cached pages a reader of the race window may still hold (epoch reclamation)."""
        pool = self.pool
        if pool.epoch_reclaim:
            last_exited = pool.epochs.last_exited(now)
            if last_exited < pool.epochs.epoch:
                return np.flatnonzero((pool.state == CACHED) & (pool.release_epoch > last_exited))
        return np.zeros(0, dtype=np.int64)

    def _evict(self, need: int, now: float) -> None:
        """Free at least `need` pages (and the batch minimum) by the policy's priority order."""
        target = max(need, min(self.eviction_batch_pages, self.pool.num_cached))
        freed = 0
        while freed < target:
            victims = self._shortlisted_victims(target - freed, now)
            if victims is None:
                victims = self._queued_victims(target - freed, now)
            if victims is None:
                victims = self._ranked_victims(target - freed, now)
            if victims.size == 0:
                return
            got = self._evict_pages(victims, now)
            if got == 0:
                return
            freed += got

    def _ranked_victims(self, want: int, now: float) -> np.ndarray:
        """A full round: the `want` lowest of every evictable page (fewer if there are fewer).
        With a shortlist, the `reserve` next lowest are ranked too and kept for the next rounds."""
        zone = self.protected_pages()
        candidates = self._candidates(now, zone)
        self.index.prefix.settle_any(candidates)  # prefix_pages as the policy must read them
        k = min(candidates.size, want)
        if k == 0:
            return candidates
        if self._queue is not None:
            return self._queue_ranked(candidates, k, now, zone)
        shortlist = self._shortlist
        m = k if shortlist is None else min(candidates.size, k + shortlist.reserve)
        pages, priority = self._lowest(candidates, m, now)
        if shortlist is not None:
            bound, floor = np.inf, np.inf
            if pages.size < candidates.size:
                bound = float(priority.max())
                outside = np.ones(self.pool.num_pages, dtype=bool)
                outside[pages] = False
                floor = self._lowest_floor(candidates[outside[candidates]])
            waiting = self._cached_unsafe(now)
            shortlist.restart(pages, priority, bound, floor, now, waiting, zone, self.stats)
        return self._pick(pages, priority, k)

    def _queue_ranked(
        self, candidates: np.ndarray, k: int, now: float, zone: np.ndarray
    ) -> np.ndarray:
        """A full round that queues the `reserve` next lowest pages, in order, behind its k
        victims (sim/kv/victim_queue.py)."""
        queue = self._queue
        assert queue is not None
        pages, priority = self._lowest(candidates, min(candidates.size, k + queue.reserve), now)
        if np.isnan(priority).any():  # no order holds: ranked as without a queue
            queue.pages = None
            return self._pick(pages, priority, k)
        depth = self.index.depth[pages]
        order = np.lexsort((pages, -depth, priority))  # the eviction order, as `_pick`'s
        pages, priority, depth = pages[order], priority[order], depth[order]
        top = float(priority[-1]) if pages.size < candidates.size else np.inf
        queue.restart(pages, priority, depth, top, self._cached_unsafe(now), zone)
        queue.head = k
        return pages[:k]

    def _queued_victims(self, want: int, now: float) -> np.ndarray | None:
        """The `want` next pages of the queue still there as ranked, when no page released
        since may come before them (None: a full round must decide)."""
        queue = self._queue
        if queue is None or queue.pages is None:
            return None
        zone = self.protected_pages()
        fresh = self._once_each(queue.take_fresh(zone))
        if fresh.size:
            evictable, unsafe = self._evictable(fresh, zone, now)
            joined = fresh[evictable]
            if joined.size and not (self._priority(joined, now) > queue.top).all():
                queue.pages = None  # it may come before a queued page: rank them all
                return None
            queue.waiting = fresh[unsafe]  # (scoring above `top` once evictable, or not)
        size = 2 * want + 64
        while True:
            pages, priority, depth = queue.window(size)
            at = np.flatnonzero(self._still_ranked(pages, priority, depth, zone, now))
            if at.size >= want:
                queue.head += int(at[want - 1]) + 1  # the pages skipped are gone for good
                return pages[at[:want]]
            if pages.size < size:  # the queue ran out
                queue.pages = None
                return None
            size *= 4

    def _still_ranked(
        self,
        pages: np.ndarray,
        priority: np.ndarray,
        depth: np.ndarray,
        zone: np.ndarray,
        now: float,
    ) -> np.ndarray:
        """bool per queued page: evictable now with the priority and depth it was ranked with
        (if not, it is gone from the queue for good: a page held again or evicted comes back
        only when released, with the pages that joined, as does a page out of the zone)."""
        ranked, _ = self._evictable(pages, zone, now)
        ranked &= self._priority(pages, now) == priority
        ranked &= self.index.depth[pages] == depth
        return ranked

    def _lowest_floor(self, pages: np.ndarray) -> float:
        """The lowest priority floor among these pages (-inf: the policy gives none)."""
        if self._floor is None:
            return -np.inf
        return float(np.asarray(self._floor(self.stats, pages), dtype=np.float64).min())

    def _shortlisted_victims(self, want: int, now: float) -> np.ndarray | None:
        """The `want` lowest evictable pages from the shortlist, when it is sure to hold them
        (None: a full round must decide)."""
        shortlist = self._shortlist
        if shortlist is None or shortlist.groups is None:
            return None
        zone = self.protected_pages()
        victims = None
        if self._rejoin(shortlist, zone, now):
            victims = self._take_lowest(shortlist, want, zone, now)
        if victims is None:
            shortlist.pages = None
        return victims

    def _rejoin(self, shortlist: Shortlist, zone: np.ndarray, now: float) -> bool:
        """The pages that may have become evictable since the last round: the evictable ones
        join the shortlist in new groups, those a reader may still hold wait. False: one is
        still listed (its entry may be stale)."""
        fresh = shortlist.fresh(zone)
        if fresh.size == 0:
            return True
        fresh = self._once_each(fresh)
        if (shortlist.owner[fresh] >= 0).any():
            return False
        evictable, unsafe = self._evictable(fresh, zone, now)
        shortlist.waiting = fresh[unsafe]
        joined = fresh[evictable]
        if joined.size:
            self.index.prefix.settle_any(joined)  # prefix_pages as the policy must read them
            shortlist.add(joined, self.stats)
        return True

    def _take_lowest(
        self, shortlist: Shortlist, want: int, zone: np.ndarray, now: float
    ) -> np.ndarray | None:
        """The `want` lowest pages of the shortlist's groups, lowest priority first (ties:
        deeper, then lower id), when every page left out is sure to score above them and
        those taken are still as listed (None: a full round must decide)."""
        assert shortlist.groups is not None
        stats = shortlist.stats()
        priority = np.asarray(
            self.eviction.priority(stats, np.arange(len(shortlist.groups)), now), dtype=np.float64
        )
        if np.isnan(priority).any():
            return None
        bound = shortlist.bound_at(now)
        stay = priority < bound  # the others leave, as the pages left out did ...
        if self._floor is not None and not stay.all():  # ... if their floors are as high
            rest = np.flatnonzero(~stay)
            stay[rest] = np.asarray(self._floor(stats, rest)) < shortlist.floor
        if not stay.all():
            shortlist.drop(stay)
            priority = priority[stay]
        while True:
            groups = shortlist.groups
            scores = priority.tolist()
            kth, reached = None, 0
            for i in sorted(range(len(groups)), key=scores.__getitem__):
                reached += groups[i].size()
                if reached >= want:
                    kth = scores[i]
                    break
            if kth is None or not kth < below(bound):
                return None
            chosen = [i for i, score in enumerate(scores) if score <= kth]
            fronts = [groups[i].front(want) for i in chosen]
            pages = fronts[0] if len(fronts) == 1 else np.concatenate(fronts)
            if shortlist.listed(chosen, fronts, pages):
                break
            kept = shortlist.compact(chosen)  # pages held or evicted since: look again
            priority = priority[kept]
        counts = [f.size for f in fronts]
        if not self._as_listed(shortlist, pages, np.array(chosen), counts, zone, now):
            return None
        if len(fronts) == 1:  # one group: its pages are in eviction order
            victims = pages
        else:
            victims = self._pick(pages, np.repeat(priority[chosen], counts), want, kth)
        shortlist.take(chosen, fronts, victims)
        return victims

    def _as_listed(
        self,
        shortlist: Shortlist,
        pages: np.ndarray,
        chosen: np.ndarray,
        counts: list[int],
        zone: np.ndarray,
        now: float,
    ) -> bool:
        """Are these listed pages (`counts` of each group `chosen`) evictable now, with their
        group's statistics? A listed page is cached (held again or evicted, it is unlisted)
        and out of reach of any reader (it was when it joined, and a reader never comes back
        to a cached page); its statistics change only while it is held, but for its
        prefix_pages, which a raise may change (hash_only chains hang under cached pages)."""
        if not (self.pool.state[pages] == CACHED).all():
            return False
        if zone.size and np.isin(pages, zone).any():
            return False
        if "prefix_pages" not in shortlist.fields:
            return True
        self.index.prefix.settle_any(pages)  # prefix_pages as the policy must read them
        values = shortlist.values[shortlist.fields.index("prefix_pages")]
        ours = values[chosen[0]] if chosen.size == 1 else np.repeat(values[chosen], counts)
        return bool((self.stats.prefix_pages[pages] == ours).all())

    def _lowest(self, candidates: np.ndarray, m: int, now: float) -> tuple[np.ndarray, np.ndarray]:
        """The candidates among the m lowest priorities, with every page tied with the m-th,
        and their priorities."""
        priority = None
        if m < candidates.size and self._floor is not None:
            candidates, priority = self._screen(candidates, m, now)
        if priority is None:
            priority = self._priority(candidates, now)
        if m < candidates.size:  # the m lowest, plus every page tied with the m-th
            keep = priority <= np.partition(priority, m - 1)[m - 1]
            candidates, priority = candidates[keep], priority[keep]
        return candidates, priority

    def _pick(
        self, pages: np.ndarray, priority: np.ndarray, k: int, kth: float | None = None
    ) -> np.ndarray:
        """The k lowest of these pages (which hold the k lowest evictable ones and every page
        tied with the k-th), lowest priority first; ties: deeper (tail) pages first, then lower
        page id. kth: the k-th lowest priority, when the caller has it already."""
        if k < pages.size:
            if kth is None:
                kth = np.partition(priority, k - 1)[k - 1]
            keep = priority <= kth
            pages, priority = pages[keep], priority[keep]
            if pages.size > PICK_TIED_MIN:  # many ties with the k-th (a prefix's pages tie)
                return self._pick_tied(pages, priority, kth, k)
        order = np.lexsort((pages, -self.index.depth[pages], priority))[:k]
        return pages[order]

    def _pick_tied(self, pages: np.ndarray, priority: np.ndarray, kth: float, k: int) -> np.ndarray:
        """`_pick` of more than k pages whose priorities are <= kth, the k-th lowest: the pages
        below it in the full order, then as many of those at kth as are missing, deeper first,
        then lower id, ranked by one int64 key (a partition, not a sort of every tie)."""
        lower = priority < kth
        first = pages[lower]
        first = first[np.lexsort((first, -self.index.depth[first], priority[lower]))]
        tied = pages[~lower]
        missing = k - first.size  # >= 1: fewer than k pages are below the k-th lowest
        depth = self.index.depth[tied].astype(np.int64)
        key = (_DEPTH_KEY - depth) << 32 | tied  # depth >= 0, page ids < 2**32
        key = np.sort(np.partition(key, missing - 1)[:missing])
        return np.concatenate((first, key & _PAGE_BITS))

    def _once_each(self, pages: np.ndarray) -> np.ndarray:
        """These pages, each once (in no particular order; the rounds' victims do not depend on
        it). A scatter and a gather over a pool-sized scratch array, not a sort: the position
        that wrote a page's slot last is the one kept."""
        at = self._positions  # (a kept scratch array: no pool-sized allocation a round)
        positions = np.arange(pages.size)
        at[pages] = positions
        return pages[at[pages] == positions]

    def _priority(self, pages: np.ndarray, now: float) -> np.ndarray:
        return np.asarray(self.eviction.priority(self.stats, pages, now), dtype=np.float64)

    def _screen(
        self, candidates: np.ndarray, k: int, now: float
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The candidates that may be among the k lowest priorities, with every page tied with
        the k-th (a policy with a priority floor, see `FlooredEviction`), and their priorities
        when already computed.

        Any k pages whose priorities are <= `bound` make the k-th lowest priority <= bound, and
        a page whose floor is above bound has a priority above it. The pages kept therefore hold
        every page the full ranking would evict, and the same k-th priority: the same victims in
        the same order, scoring only them. The bound comes from the pages under the last round's
        bound when there are k of them (rounds evict similar pages), else from the k lowest
        floors; either way it is a valid bound, so the victims do not depend on it."""
        assert self._floor is not None
        floor = np.asarray(self._floor(self.stats, candidates), dtype=np.float64)
        near = floor <= self._last_bound
        if np.count_nonzero(near) >= k:
            pages = candidates[near]
            priority = self._priority(pages, now)
            bound = np.partition(priority, k - 1)[k - 1]
            if bound <= self._last_bound:  # every page kept is among those just scored
                self._last_bound = bound
                keep = floor[near] <= bound
                return pages[keep], priority[keep]
        else:
            lowest = candidates[np.argpartition(floor, k - 1)[:k]]
            bound = self._priority(lowest, now).max()
        self._last_bound = bound
        kept = candidates[floor <= bound]
        if kept.size < k:  # (a NaN priority: rank them all)
            self._last_bound = -np.inf
            return candidates, None
        return kept, None

    def _evict_pages(self, pages: np.ndarray, now: float) -> int:
        """Unindex pages (int64, in eviction order) and their indexed descendants; free the cached ones."""
        index = self.index
        keys = None  # the removed pages' keys, when the removal has them
        if index.closed_under_children(pages):  # the usual case: tails come with their parents
            removed = pages
            keys = index.remove_many(removed)
        else:
            removed = np.array(self._remove_subtrees(pages.tolist()), dtype=np.int64)
        if removed.size == 0:
            return 0
        if self._shortlist is not None:
            self._shortlist.unlist(removed)
        if self.protected is not None:
            self.protected.on_removed(removed)
        if self.listeners:  # (the keys are listed only for a listener)
            self._emit("removed", index.page_key[removed].tolist() if keys is None else keys)
        evicted = removed[
            self.pool.state[removed] == CACHED
        ]  # still-used ones just lose their entry
        if evicted.size:
            self.pool.evict_many(evicted, now)
            self.num_evicted_pages += int(evicted.size)
            self._count_by_depth(self.index.depth[evicted])
        return int(evicted.size)

    def _count_by_depth(self, depths: np.ndarray) -> None:
        counts = np.bincount(depths)
        if counts.size > self.evicted_by_depth.size:
            counts[: self.evicted_by_depth.size] += self.evicted_by_depth
            self.evicted_by_depth = counts
        else:
            self.evicted_by_depth[: counts.size] += counts

    def _remove_subtrees(self, pages: list[int]) -> list[int]:
        """Unindex pages one by one with every indexed descendant (no prefix walk reaches them)."""
        removed = []
        stack = pages[::-1]
        while stack:
            p = stack.pop()
            if self.index.indexed[p]:
                removed.append(p)
                stack.extend(self.index.remove(p).tolist())
        return removed

    def _emit(self, event: str, keys: list[int]) -> None:
        """One event per batch of pages: listeners (the routing table) pay one call, not one per page."""
        if keys:
            for listener in self.listeners:
                listener(event, keys, self.node_id)
