"""Read-only views the policies decide from; policies never touch simulator state."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(slots=True, frozen=True)
class NodeView:
    node_id: int
    num_waiting: int
    num_running: int
    kv_capacity_tokens: int
    kv_free_tokens: int  # free plus evictable cached tokens
    kv_used_tokens: int  # held by running requests
    waiting_prompt_tokens: int
    cached_prefix_tokens: int  # of the request being routed, per the routing table

    @property
    def load(self) -> float:
        """Memory pressure in [0, 1]: KV held by running requests plus the prompts queued for it."""
        demand = self.kv_used_tokens + self.waiting_prompt_tokens
        return min(1.0, demand / max(1, self.kv_capacity_tokens))

    @property
    def outstanding(self) -> int:
        return self.num_waiting + self.num_running


@dataclass(slots=True, frozen=True)
class RouteQuery:
    request_id: int
    prompt_tokens: int
    keys: np.ndarray  # uint64 chained page keys of the prompt
    page_size: int
