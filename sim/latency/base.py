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


class StepOverhead:
    """A latency model plus a fixed cost per step: what the priced kernels leave out (norms,
    rotary, activations, sampling, the scheduler's CPU time), `gpu.step_overhead_s`."""

    def __init__(self, inner: LatencyModel, overhead_s: float):
        self.inner, self.overhead_s = inner, overhead_s
        self.name = f"{inner.name}+{overhead_s * 1e3:g}ms/step"

    def step_time_s(self, plan: StepPlan) -> float:
        return self.inner.step_time_s(plan) + self.overhead_s
