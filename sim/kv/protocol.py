"""The one interface a node's scheduler has to KV memory: contiguous, paged and placed managers.

The scheduler, the router and the metrics talk to KV memory only through these methods; nothing
probes a manager for its concrete type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from sim.kv.manager import KVUsage
    from sim.sequence import Sequence


@dataclass(slots=True)
class CacheCounters:
    """A node's cache counters so far (all zero where a mechanism has no such thing)."""

    protected_pages: int = 0  # pages in the protected zone now
    evicted_pages: int = 0
    use_after_free: int = 0  # pages handed out while a reader of their old owner ran
    admission_rejected_tokens: int = 0
    peak_retired_bytes: int = 0  # epoch reclamation: the most memory waiting for readers
    alloc_stalls: int = 0  # contiguous: requests that found no hole (each counted once)
    evicted_by_depth: np.ndarray | None = None  # int64 [max depth + 1]: evicted pages by depth


class KVManager(Protocol):
    def admit(self, seq: Sequence, now: float) -> bool:
        """Place a waiting request (its cached prefix or its reservation); False if it cannot."""
        ...

    def commit(self, seq: Sequence, now: float) -> None:
        """The admission holds: record hits, decide cacheability."""
        ...

    def oom_action(self, seq: Sequence) -> str:
        """What a failed admission of `seq` does: "wait", "reject" or "crash" (cache.on_oom)."""
        ...

    def reset(self) -> None:
        """The serving process restarted (a crash): the pool comes back empty."""
        ...

    def grow(self, seq: Sequence, num_tokens: int, now: float) -> bool:
        """Room for `num_tokens` more tokens of `seq`; False if memory is short."""
        ...

    def on_computed(self, seq: Sequence, num_tokens: int, now: float) -> None:
        """A step computed `num_tokens` of `seq` (seq.num_computed already counts them)."""
        ...

    def free(self, seq: Sequence) -> None:
        """Give back everything `seq` holds (cached pages stay cached)."""
        ...

    def end_step(self, now: float) -> int:
        """A step ended at `now`: a new epoch; returns pages freed."""
        ...

    def idle_reclaim(self, now: float) -> float | None:
        """Nothing runs: 0.0 if pages came back, seconds until some can, or None."""
        ...

    def free_tokens(self) -> int:
        """Tokens a new request could take now (free plus evictable)."""
        ...

    def capacity_tokens(self) -> int: ...

    def used_tokens(self) -> int:
        """Tokens held for running requests (cheap: the router asks on every decision)."""
        ...

    def usage(self) -> KVUsage: ...

    def counters(self) -> CacheCounters: ...

    def can_ever_fit(self, seq: Sequence, headroom_tokens: int) -> bool:
        """Could an empty node place `seq` whole, keeping `headroom_tokens` free?"""
        ...


def headroom_tokens(admission_watermark: float, capacity_tokens: int) -> int:
    """The admission headroom (vLLM v0's watermark): KV a node keeps free when admitting, so the
    running requests can grow. One rule for the scheduler, placement and the cluster."""
    return int(admission_watermark * capacity_tokens)
