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


@dataclass(slots=True)
class StepShape:
    """A step as plain Python ints: what both models need of it (the simulator prices one per
    step, so no arrays). The decode contexts enter only through their count and sum."""

    prefill_new: list[int]  # new prompt tokens per prefill chunk
    prefill_ctx: list[int]  # tokens already in KV before each chunk
    num_decode: int
    decode_ctx_sum: int  # sum over decodes of their context length (tokens in KV)


class LatencyModel(Protocol):
    name: str

    def step_time_s(self, plan: StepPlan) -> float: ...

    def shape_time_s(self, shape: StepShape) -> float:
        """`step_time_s` of the step `shape` describes, the same float."""
        ...

    def cascade_prefix_s(self, group_size: int, prefix_tokens: int) -> float:
        """Seconds (all layers) of one group's shared-prefix pass in a cascade decode."""
        ...


class StepOverhead:
    """A latency model plus a fixed cost per step: what the priced kernels leave out (norms,
    rotary, activations, sampling, launches, the scheduler's CPU time), `gpu.step_overhead_s`,
    and the extra of a step that carries a prefill chunk (an engine that replays CUDA graphs
    for decode-only steps launches mixed steps eagerly), `gpu.prefill_step_overhead_s`."""

    def __init__(
        self,
        inner: LatencyModel,
        overhead_s: float,
        prefill_extra_s: float = 0.0,
        per_token_s: float = 0.0,
    ):
        self.inner, self.overhead_s = inner, overhead_s
        self.prefill_extra_s, self.per_token_s = prefill_extra_s, per_token_s
        self.name = (
            f"{inner.name}+overhead({overhead_s * 1e3:.3g} ms/step, "
            f"{prefill_extra_s * 1e3:.3g} ms/prefill step, {per_token_s * 1e6:.3g} us/token)"
        )

    def _extra_s(self, has_prefill: bool, tokens: int) -> float:
        return (
            self.overhead_s
            + (self.prefill_extra_s if has_prefill else 0.0)
            + (self.per_token_s * tokens)
        )

    def step_time_s(self, plan: StepPlan) -> float:
        extra = self._extra_s(bool(plan.prefill_new.size), plan.num_tokens)
        return self.inner.step_time_s(plan) + extra

    def shape_time_s(self, shape: StepShape) -> float:
        tokens = sum(shape.prefill_new) + shape.num_decode
        return self.inner.shape_time_s(shape) + self._extra_s(bool(shape.prefill_new), tokens)

    def cascade_prefix_s(self, group_size: int, prefix_tokens: int) -> float:
        return self.inner.cascade_prefix_s(group_size, prefix_tokens)
