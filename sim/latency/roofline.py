"""Per-step latency model: prices one engine step (a batch of prefill chunks and decodes).

Two models share one Protocol. `RooflineLatency` is the documented fallback: every part of the
step takes max(FLOPs / matmul rate, bytes / HBM bandwidth) at the GPU preset's measured-class
ceilings, plus a ring all-reduce over the interconnect for tensor parallelism; it is a lower bound
(no launch overhead, no efficiency loss). `sim.latency.calibrated.CalibratedLatency` replaces the
compute parts with tables measured on the real GPU by our Triton kernels (`kvsched calibrate`).
"""

from __future__ import annotations

import numpy as np

from sim.config import GpuConfig, ModelConfig
from sim.latency.base import StepPlan, StepShape

ALLREDUCE_LATENCY_S = 10e-6  # per all-reduce call: NCCL small-message latency class on NVLink


class RooflineLatency:
    name = "roofline"

    def __init__(self, model: ModelConfig, gpu: GpuConfig, tp: int):
        self.model, self.gpu, self.tp = model, gpu, tp
        h = model.hidden_size
        attn_proj = (
            h * model.num_q_heads * model.head_dim * 2 + 2 * h * model.num_kv_heads * model.head_dim
        )
        self.linear_params_per_gpu = (
            model.num_layers * (attn_proj + 3 * h * model.intermediate_size) / tp
        )
        self.lm_head_params_per_gpu = model.vocab_size * h / tp
        self.kv_bytes_per_token_per_gpu = model.kv_bytes_per_token / tp
        # Per query token per context token per layer: QK^T and PV, 2 FLOPs per MAC, all heads.
        self.attn_flops_per_pair_per_gpu = (
            4 * model.num_q_heads * model.head_dim * model.num_layers / tp
        )

    def step_time_s(self, plan: StepPlan) -> float:
        return self.linear_s(plan) + self.attention_s(plan) + self.allreduce_s(plan.num_tokens)

    def shape_time_s(self, shape: StepShape) -> float:
        # The decode contexts enter the roofline only through their sum and count.
        decode = np.zeros(shape.num_decode, dtype=np.int64)
        if shape.num_decode:
            decode[0] = shape.decode_ctx_sum
        new = np.array(shape.prefill_new, dtype=np.int64)
        return self.step_time_s(StepPlan(new, np.array(shape.prefill_ctx, dtype=np.int64), decode))

    def decode_steps_s(self, num_decode: int, ctx_sums: np.ndarray) -> np.ndarray:
        """`shape_time_s` of decode-only steps of num_decode sequences, one per decode context
        sum (int64), in one numpy pass: elementwise the same operations and floats."""
        ctx_sums = np.asarray(ctx_sums, dtype=np.int64)
        if num_decode == 0:  # an empty step: whatever it costs, the same for every element
            return np.full(ctx_sums.shape, self.shape_time_s(StepShape([], [], 0, 0)))
        empty = np.zeros(0, dtype=np.int64)
        plan = StepPlan(empty, empty, np.zeros(num_decode, dtype=np.int64))
        linear, allreduce = self.linear_s(plan), self.allreduce_s(plan.num_tokens)
        kv_tokens_read = ctx_sums.astype(np.float64)
        read_s = kv_tokens_read * self.kv_bytes_per_token_per_gpu / self.gpu.hbm_bytes_per_s
        pairs = 0.0 + kv_tokens_read  # no prefill pairs
        compute_s = pairs * self.attn_flops_per_pair_per_gpu / self.gpu.bf16_flops_per_s
        return linear + np.maximum(read_s, compute_s) + allreduce

    def linear_s(self, plan: StepPlan) -> float:
        tokens = plan.num_tokens
        num_logits = int(plan.prefill_new.shape[0]) + int(plan.decode_ctx.shape[0])
        flops = 2 * (self.linear_params_per_gpu * tokens + self.lm_head_params_per_gpu * num_logits)
        weight_bytes = (
            self.linear_params_per_gpu + self.lm_head_params_per_gpu
        ) * self.model.dtype_bytes
        return max(flops / self.gpu.bf16_flops_per_s, weight_bytes / self.gpu.hbm_bytes_per_s)

    def attention_s(self, plan: StepPlan) -> float:
        kv_tokens_read = float(
            plan.decode_ctx.sum() + plan.prefill_ctx.sum() + plan.prefill_new.sum()
        )
        read_s = kv_tokens_read * self.kv_bytes_per_token_per_gpu / self.gpu.hbm_bytes_per_s
        new = plan.prefill_new.astype(np.float64)
        # Causal prefill: each new token attends to the context plus, on average, half the chunk.
        pairs = float((new * (plan.prefill_ctx + (new + 1) / 2)).sum() + plan.decode_ctx.sum())
        compute_s = pairs * self.attn_flops_per_pair_per_gpu / self.gpu.bf16_flops_per_s
        return max(read_s, compute_s)

    def allreduce_s(self, tokens: int) -> float:
        if self.tp == 1:
            return 0.0
        # Two all-reduces per layer (after attention and after the MLP); ring all-reduce moves
        # 2 (tp-1)/tp of the activation bytes over each GPU's link.
        nbytes = tokens * self.model.hidden_size * self.model.dtype_bytes
        per_call = 2 * (self.tp - 1) / self.tp * nbytes / self.gpu.interconnect_bytes_per_s
        return 2 * self.model.num_layers * (per_call + ALLREDUCE_LATENCY_S)

    def cascade_prefix_s(self, group_size: int, prefix_tokens: int) -> float:
        """A group's shared prefix read once for all its query heads (cascade decode)."""
        read_s = prefix_tokens * self.kv_bytes_per_token_per_gpu / self.gpu.hbm_bytes_per_s
        flops = group_size * prefix_tokens * self.attn_flops_per_pair_per_gpu
        return max(read_s, flops / self.gpu.bf16_flops_per_s)
