"""Eviction policies: a priority per unreferenced cached page; lower goes first.

The cache (sim/kv/paged_cache.py) owns the pages and breaks ties (deeper pages first, so a
prefix's tail goes before its head); a policy only scores.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict

from sim.kv.paged_cache import PageStats


class EvictionPolicy(Protocol):
    def priority(self, stats: PageStats, pages: np.ndarray, now: float) -> np.ndarray:
        """float64 [len(pages)]: eviction priority of each page; the lowest is evicted first."""
        ...


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LRU:
    """Least recently used first."""

    Params = NoParams

    def __init__(self, params: NoParams):
        pass

    def priority(self, stats: PageStats, pages: np.ndarray, now: float) -> np.ndarray:
        return stats.last_access_s[pages]
