"""Eviction policies: a priority per unreferenced cached page; lower goes first.

The cache (sim/kv/paged_cache.py) owns the pages, skips the protected zone, and breaks ties
(deeper pages first, so a prefix's tail goes before its head, then lower page ids); a policy only
scores. Stats are vectors over pages (sim/kv/views.PageStats), so a policy scores a whole
eviction round in one numpy expression. A policy may also give `priority_floor` (a lower bound of
its priority at any time, page by page; sim/kv/paged_cache.FlooredEviction): the cache then scores
only the pages whose floor is low enough to matter, with the same victims. `lowest_later` bounds
how far time can lower a priority (sim/kv/shortlist.DriftBoundedEviction): the cache then scores
most rounds over a shortlist carried from the last one, with the same victims.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from policies.params import NoParams
from sim.kv.views import PageStats
from sim.policy_api import EvictionPolicy

__all__ = ["EvictionPolicy"]


class LRU:
    """Least recently used first (last hit, or last read by a request that used it)."""

    Params = NoParams
    # time alone never changes a priority, nor do a cached page's statistics: the cache queues
    # its next victims in order (sim/kv/victim_queue.py)
    time_invariant = True

    def __init__(self, params: NoParams):
        pass

    reads = ("last_access_s",)  # the statistics its priority reads (sim/kv/shortlist.py)

    def priority(self, stats: PageStats, pages: np.ndarray, now: float) -> np.ndarray:
        return stats.last_access_s[pages]

    def lowest_later(self, priority: float, floor: float, elapsed_s: float) -> float:
        """Time alone never changes it."""
        return priority


class LFU:
    """Least frequently used first (requests that used the page since it was cached)."""

    Params = NoParams
    # time alone never changes a priority, nor do a cached page's statistics: the cache queues
    # its next victims in order (sim/kv/victim_queue.py)
    time_invariant = True

    def __init__(self, params: NoParams):
        pass

    reads = ("hit_count",)

    def priority(self, stats: PageStats, pages: np.ndarray, now: float) -> np.ndarray:
        return stats.hit_count[pages].astype(np.float64)

    def lowest_later(self, priority: float, floor: float, elapsed_s: float) -> float:
        """Time alone never changes it."""
        return priority


class FIFO:
    """Oldest cached first, however often it is used."""

    Params = NoParams
    # time alone never changes a priority, nor do a cached page's statistics: the cache queues
    # its next victims in order (sim/kv/victim_queue.py)
    time_invariant = True

    def __init__(self, params: NoParams):
        pass

    reads = ("created_s",)

    def priority(self, stats: PageStats, pages: np.ndarray, now: float) -> np.ndarray:
        return stats.created_s[pages]

    def lowest_later(self, priority: float, floor: float, elapsed_s: float) -> float:
        """Time alone never changes it."""
        return priority


class ScoredParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Seconds for a page's frequency to lose half its weight when nobody uses it.
    half_life_s: float = Field(default=60.0, gt=0)
    # Score per 1000 tokens of the prefix the page belongs to (its rebuild cost grows with it).
    length_weight: float = Field(default=1.0, ge=0)


class Scored:
    """The article's score, lowest first: hit_count x 0.5^(idle_s / half_life_s) + length_weight x
    prefix_tokens / 1000, where prefix_tokens is the longest cached prefix through the page."""

    Params = ScoredParams
    reads = ("last_access_s", "hit_count", "prefix_pages")

    def __init__(self, params: ScoredParams):
        self.p = params

    def priority(self, stats: PageStats, pages: np.ndarray, now: float) -> np.ndarray:
        # The formula above, operation by operation (the same floats), in one scratch array.
        score = np.subtract(now, stats.last_access_s[pages])
        np.maximum(0.0, score, out=score)  # idle_s
        np.negative(score, out=score)
        np.divide(score, self.p.half_life_s, out=score)
        np.exp2(score, out=score)  # decay
        np.multiply(stats.hit_count[pages], score, out=score)
        return np.add(score, self.priority_floor(stats, pages), out=score)

    def lowest_later(self, priority: float, floor: float, elapsed_s: float) -> float:
        """Only the frequency term decays, by 0.5^(elapsed_s / half_life_s) at most: a page
        now at p >= priority with floor f >= floor is later >= f + (p - f) x decay, which is
        >= floor + (priority - floor) x decay."""
        decay = 2.0 ** (-max(0.0, elapsed_s) / self.p.half_life_s)
        return floor + (priority - floor) * decay

    def priority_floor(self, stats: PageStats, pages: np.ndarray) -> np.ndarray:
        """The length term alone (the frequency term is >= 0): a lower bound at any time, and the
        very float the priority adds it as."""
        prefix_tokens = stats.prefix_pages[pages] * np.int64(stats.page_size)  # (int32 pages)
        if self.p.length_weight == 1.0:  # 1.0 x tokens is the tokens as floats: one pass less
            return prefix_tokens / 1000.0
        return self.p.length_weight * prefix_tokens / 1000.0
