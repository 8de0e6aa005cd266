"""What every latency model prices: one engine step (a batch of prefill chunks and decodes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(slots=True)
class StepPlan:
    """One engine step on one node (all tensor-parallel ranks together)."""

    prefill_new: np.ndarray  # int64 [num_prefill_chunks]: new prompt tokens computed per chunk
    prefill_ctx: np.ndarray  # int64 [num_prefill_chunks]: tokens already in KV before the chunk
    decode_ctx: np.ndarray  # int64 [num_decode]: context length (tokens in KV) per decode

    @property
    def num_tokens(self) -> int:
        return int(self.prefill_new.sum()) + int(self.decode_ctx.shape[0])


class LatencyModel(Protocol):
    name: str

    def step_time_s(self, plan: StepPlan) -> float: ...
