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
    # KV tokens a decode reads that another decode of the step reads too (the same pages after
    # prefix hits: sim/latency/shared_reads.py); 0 when unknown or none
    decode_shared_tokens: int = 0
    decode_ctx_max: int = 0  # the longest decode context (0: unknown)

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
    decode_shared_tokens: int = 0  # of that sum, tokens another decode of the step also reads
    decode_ctx_max: int = 0  # the longest decode context (0: unknown, priced at the mean)


class LatencyModel(Protocol):
    name: str

    def step_time_s(self, plan: StepPlan) -> float: ...

    def shape_time_s(self, shape: StepShape) -> float:
        """`step_time_s` of the step `shape` describes, the same float."""
        ...

    def cascade_prefix_s(self, group_size: int, prefix_tokens: int) -> float:
        """Seconds (all layers) of one group's shared-prefix pass in a cascade decode."""
        ...

    def decode_steps_s(self, num_decode: int, ctx_sums: np.ndarray) -> np.ndarray:
        """`shape_time_s` of decode-only steps of num_decode sequences, one per decode context
        sum in ctx_sums (int64): elementwise the same floats, in one numpy pass."""
        ...


class StepOverhead:
    """A latency model plus what its priced kernels leave out, each term measured on an engine
    run (`kvsched validate`): a fixed cost per step (host work around the GPU: metadata, the
    sync, sampling, the scheduler's CPU time), `gpu.step_overhead_s`; a cost per prefill token
    (elementwise work: norms, rotary, activations), `gpu.token_overhead_s`; a cost per decoding
    sequence (its token's elementwise work and the host's per-sequence work),
    `gpu.decode_overhead_s`; an extra for a step that carries a prefill chunk,
    `gpu.prefill_step_overhead_s`; and a floor under such a step's device time,
    `gpu.mixed_step_floor_s` (an engine that launches attention from the host layer by layer is
    host-bound on small mixed steps: it cannot finish a step faster than it issues it, and above
    the floor the launches hide behind the GPU work), or `gpu.eager_step_floor_s` for a step of
    more than `gpu.mixed_graph_max_tokens` tokens (launched whole from the host: every kernel
    of every layer is a launch). The priced kernels themselves run `gpu.device_time_scale` times
    as long on the serving machine as on the calibration machine.

        device = inner * scale + per_token * prefill_tokens + per_decode * decodes
        step   = (max(device, floor) + prefill_extra if prefill else device) + overhead
    """

    def __init__(
        self,
        inner: LatencyModel,
        overhead_s: float,
        prefill_extra_s: float = 0.0,
        per_token_s: float = 0.0,
        mixed_floor_s: float = 0.0,
        per_decode_s: float = 0.0,
        eager_floor_s: float = 0.0,
        graph_max_tokens: int = 0,
        device_scale: float = 1.0,
    ):
        self.inner, self.overhead_s = inner, overhead_s
        self.device_scale = device_scale
        self.prefill_extra_s, self.per_token_s = prefill_extra_s, per_token_s
        self.mixed_floor_s, self.per_decode_s = mixed_floor_s, per_decode_s
        self.eager_floor_s, self.graph_max_tokens = eager_floor_s, graph_max_tokens
        self.name = (
            f"{inner.name}+overhead({overhead_s * 1e3:.3g} ms/step, "
            f"{prefill_extra_s * 1e3:.3g} ms/prefill step, {per_token_s * 1e6:.3g} us/token"
            + (f", {per_decode_s * 1e6:.3g} us/decode" if per_decode_s else "")
            + (f", {mixed_floor_s * 1e3:.3g} ms mixed-step floor" if mixed_floor_s else "")
            + (f", {eager_floor_s * 1e3:.3g} ms eager-step floor" if eager_floor_s else "")
            + (f", device time x{device_scale:.3g}" if device_scale != 1.0 else "")
            + ")"
        )

    def _with_terms(self, inner_s: float, prefill_tokens: int, num_decode: int) -> float:
        device = (
            inner_s * self.device_scale
            + self.per_token_s * prefill_tokens
            + self.per_decode_s * num_decode
        )
        if prefill_tokens:
            graphed = prefill_tokens + num_decode <= self.graph_max_tokens
            floor = self.mixed_floor_s if graphed else self.eager_floor_s
            device = max(device, floor) + self.prefill_extra_s
        return device + self.overhead_s

    def step_time_s(self, plan: StepPlan) -> float:
        prefill_tokens = int(plan.prefill_new.sum())
        num_decode = int(plan.decode_ctx.shape[0])
        return self._with_terms(self.inner.step_time_s(plan), prefill_tokens, num_decode)

    def shape_time_s(self, shape: StepShape) -> float:
        inner = self.inner.shape_time_s(shape)
        return self._with_terms(inner, sum(shape.prefill_new), shape.num_decode)

    def cascade_prefix_s(self, group_size: int, prefix_tokens: int) -> float:
        return self.inner.cascade_prefix_s(group_size, prefix_tokens)

    def decode_steps_s(self, num_decode: int, ctx_sums: np.ndarray) -> np.ndarray:
        inner = self.inner.decode_steps_s(num_decode, ctx_sums)
        device = (
            inner * self.device_scale + self.per_decode_s * num_decode
        )  # no prefill tokens: _with_terms
        return device + self.overhead_s


def prices_decode_batch(model: object) -> bool:
    """Does the model (or the model it wraps) price a step's decodes from more than their count
    and context sum: the pages they share (`StepShape.decode_shared_tokens`) or their longest
    context (`StepShape.decode_ctx_max`), from a measurement?"""
    while model is not None:
        if getattr(model, "shared_reads", None) is not None:
            return True
        if getattr(model, "ragged", None) is not None:
            return True
        model = getattr(model, "inner", None)
    return False
