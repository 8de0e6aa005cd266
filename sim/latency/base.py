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
    run (`kvsched validate`), in two parts the engine clocks separately.

    Device (the GPU clock): the priced kernels run `gpu.device_time_scale` times as long on the
    serving machine as on the calibration machine, plus `gpu.decode_kv_overhead_s` per token of
    the decodes' contexts (what grows with the KV read beyond the tables: a whole step's, not
    attention alone's); a step with a prefill chunk adds its
    elementwise work per prefill token (norms, rotary, activations), `gpu.token_overhead_s`, and
    cannot take less than a floor, `gpu.mixed_step_floor_s` (an engine that launches attention
    from the host layer by layer cannot finish a small mixed step faster than it issues it), or
    `gpu.eager_step_floor_s` for a step of more than `gpu.mixed_graph_max_tokens` tokens
    (launched whole from the host: every kernel of every layer is a launch).

    Host (the CPU around the GPU, serial with it in a synchronous engine): a fixed cost per step,
    `gpu.step_overhead_s` (the sync, sampling, the loop), and per decoding sequence,
    `gpu.decode_overhead_s` (the scheduler's work on it, its ids and block table); a step with a
    prefill chunk adds a fixed extra, `gpu.prefill_step_overhead_s`, and costs per decoding
    sequence (`gpu.mixed_decode_overhead_s`: its inputs built eagerly, not copied into a graph),
    per chunk (`gpu.chunk_overhead_s`), per token of the chunks' context
    (`gpu.context_overhead_s`: block-table rows, the prefix match, the prefill plan) and per
    prefill token (`gpu.host_token_overhead_s`: gathering ids, hashing the chunk's pages).

        kernels = inner * scale + per_kv * decode_context_tokens
        device = kernels                                         (decode-only step)
               = max(kernels + per_token * prefill_tokens, floor)         (a chunk in it)
        host   = overhead + per_decode * decodes
                 + (extra + mixed_decode * decodes + per_chunk * chunks
                    + per_context * context_tokens + host_token * prefill_tokens if a chunk)
        step   = device + host
    """

    def __init__(self, inner: LatencyModel, terms: OverheadTerms, graph_max_tokens: int = 0):
        self.inner, self.terms, self.graph_max_tokens = inner, terms, graph_max_tokens
        self.name = f"{inner.name}+overhead({terms.describe()})"

    def _with_terms(
        self,
        inner_s: float,
        *,
        prefill_tokens: int,
        num_decode: int,
        chunks: int,
        context: int,
        decode_ctx: int,
    ) -> float:
        t = self.terms
        device = inner_s * t.device_scale + t.per_kv_s * decode_ctx
        if prefill_tokens:
            graphed = prefill_tokens + num_decode <= self.graph_max_tokens
            floor = t.mixed_floor_s if graphed else t.eager_floor_s
            device = max(device + t.per_token_s * prefill_tokens, floor)
        return device + t.host_s(num_decode, chunks, context, prefill_tokens)

    def step_time_s(self, plan: StepPlan) -> float:
        return self._with_terms(
            self.inner.step_time_s(plan),
            prefill_tokens=int(plan.prefill_new.sum()),
            num_decode=int(plan.decode_ctx.shape[0]),
            chunks=int(plan.prefill_new.shape[0]),
            context=int(plan.prefill_ctx.sum()),
            decode_ctx=int(plan.decode_ctx.sum()),
        )

    def shape_time_s(self, shape: StepShape) -> float:
        return self._with_terms(
            self.inner.shape_time_s(shape),
            prefill_tokens=sum(shape.prefill_new),
            num_decode=shape.num_decode,
            chunks=len(shape.prefill_new),
            context=sum(shape.prefill_ctx),
            decode_ctx=shape.decode_ctx_sum,
        )

    def cascade_prefix_s(self, group_size: int, prefix_tokens: int) -> float:
        # A kernel on the serving machine: scaled like the rest. The KV term, measured on steps
        # of the paged kernel, prices the cascade's tails (their decode contexts), not this pass.
        return self.inner.cascade_prefix_s(group_size, prefix_tokens) * self.terms.device_scale

    def decode_steps_s(self, num_decode: int, ctx_sums: np.ndarray) -> np.ndarray:
        t = self.terms  # no prefill: _with_terms' device and host parts without the chunk terms
        inner = self.inner.decode_steps_s(num_decode, ctx_sums)
        return inner * t.device_scale + t.per_kv_s * ctx_sums + t.host_s(num_decode)


@dataclass(frozen=True, slots=True)
class OverheadTerms:
    """StepOverhead's terms (the `gpu.` fields of the same meaning), seconds."""

    overhead_s: float = 0.0  # step_overhead_s
    prefill_extra_s: float = 0.0  # prefill_step_overhead_s
    per_token_s: float = 0.0  # token_overhead_s
    mixed_floor_s: float = 0.0  # mixed_step_floor_s
    per_decode_s: float = 0.0  # decode_overhead_s
    eager_floor_s: float = 0.0  # eager_step_floor_s
    mixed_decode_s: float = 0.0  # mixed_decode_overhead_s
    per_chunk_s: float = 0.0  # chunk_overhead_s
    per_context_s: float = 0.0  # context_overhead_s
    host_token_s: float = 0.0  # host_token_overhead_s
    device_scale: float = 1.0  # device_time_scale
    per_kv_s: float = 0.0  # decode_kv_overhead_s

    def host_s(
        self, num_decode: int, chunks: int = 0, context: int = 0, prefill_tokens: int = 0
    ) -> float:
        """A step's host part (StepOverhead's `host`); the chunk terms only with prefill tokens."""
        host = self.overhead_s + self.per_decode_s * num_decode
        if prefill_tokens:
            host += (
                self.prefill_extra_s
                + self.mixed_decode_s * num_decode
                + self.per_chunk_s * chunks
                + self.per_context_s * context
                + self.host_token_s * prefill_tokens
            )
        return host

    def describe(self) -> str:
        parts = [
            f"{self.overhead_s * 1e3:.3g} ms/step",
            f"{self.prefill_extra_s * 1e3:.3g} ms/prefill step",
            f"{self.per_token_s * 1e6:.3g} us/token",
        ]
        optional = [
            (self.per_decode_s, 1e6, "us/decode"),
            (self.mixed_decode_s, 1e6, "us/decode in a mixed step"),
            (self.per_chunk_s, 1e6, "us/chunk"),
            (self.per_context_s, 1e9, "ns/context token"),
            (self.host_token_s, 1e9, "ns/prefill token on the host"),
            (self.mixed_floor_s, 1e3, "ms mixed-step floor"),
            (self.eager_floor_s, 1e3, "ms eager-step floor"),
            (self.per_kv_s, 1e9, "ns/decode KV token on the device"),
        ]
        parts += [f"{v * unit:.3g} {label}" for v, unit, label in optional if v]
        if self.device_scale != 1.0:
            parts.append(f"device time x{self.device_scale:.3g}")
        return ", ".join(parts)


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
