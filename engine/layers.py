"""The per-token pieces of a Llama decoder layer, shared by the engine and its reference.

Attention is the only part that differs between the two (paged kernels over a KV pool vs a
full causal softmax), so it is not here. Norms and rotary run in float32 and round to the
activation dtype, as the usual Llama implementations do.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

# The definitions (plain torch, float32 norms and rotary), shared with kernels/fused.py's checks.
from kernels.reference import apply_rope, rms_norm, rope_cos_sin


def swiglu_mlp(h: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """[tokens, hidden] -> [tokens, hidden] (this rank's partial sum under TP)."""
    gate, up = F.linear(h, w_gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w_down)


# ---------------------------------------------------------------------------------------------
# Fused variants for the engine's hot path (kernels/fused.py). The torch functions above stay the
# definition (engine/reference.py uses them); each variant below runs the Triton kernel when
# `_use_fused` says so and the torch formula otherwise, with the same results: bit-exact except
# the norm and silu, within 1 bf16 ulp (kernels/fused.py's docstring says why).
# ---------------------------------------------------------------------------------------------

# None: kernels on CUDA bf16 tensors, torch elsewhere. True: kernels on CPU as well (Triton's
# interpreter: tests). False: torch everywhere (to A/B the kernels).
USE_FUSED: bool | None = {"0": False, "1": True}.get(os.environ.get("KVSCHED_ENGINE_FUSED", ""))


def _use_fused(t: torch.Tensor) -> bool:
    if USE_FUSED is False or t.dtype != torch.bfloat16:
        return False
    return t.is_cuda or USE_FUSED is True


def rms_norm_fused(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """rms_norm in one kernel (<= 1 bf16 ulp from rms_norm)."""
    if _use_fused(x):
        from kernels import fused

        return fused.rms_norm(x, weight, eps)
    return rms_norm(x, weight, eps)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual += x IN PLACE (bf16, exactly `residual + x`), then (rms_norm(residual), residual).

    Replaces `residual = residual + x; h = rms_norm(residual, weight, eps)`."""
    if _use_fused(x):
        from kernels import fused

        return fused.add_rms_norm(x, residual, weight, eps)
    residual.add_(x)
    return rms_norm(residual, weight, eps), residual


def rope_write_kv(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    slot_pages: torch.Tensor,
    slot_offsets: torch.Tensor,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    theta: float,
) -> torch.Tensor:
    """Split qkv [T, (hq + 2 hkv) * d], rotate q and k by (cos, sin) = rope_cos_sin(positions),
    store k and v in one layer's pools [pages, hkv, page_size, d] at (slot_pages, slot_offsets);
    returns q [T, hq, d]. Bit-exact with the torch path below."""
    hq, hkv, d = num_q_heads, num_kv_heads, head_dim
    if _use_fused(qkv):
        from kernels import fused

        return fused.rope_and_write_kv(
            qkv,
            positions,
            k_pool,
            v_pool,
            slot_pages,
            slot_offsets,
            hq,
            hkv,
            d,
            theta,
            cos=cos,
            sin=sin,
        )
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    q = apply_rope(q.reshape(-1, hq, d), cos, sin)
    k_pool[slot_pages, :, slot_offsets] = apply_rope(k.reshape(-1, hkv, d), cos, sin)
    v_pool[slot_pages, :, slot_offsets] = v.reshape(-1, hkv, d)
    return q


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[T, 2I] (gate, up) -> F.silu(gate) * up, [T, I] (<= 1 bf16 ulp from torch)."""
    if _use_fused(gate_up):
        from kernels import fused

        return fused.silu_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def swiglu_mlp_fused(
    h: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor
) -> torch.Tensor:
    """swiglu_mlp with the silu * up step in one kernel."""
    return F.linear(silu_mul(F.linear(h, w_gate_up)), w_down)


__all__ = [
    "add_rms_norm",
    "apply_rope",
    "rms_norm",
    "rms_norm_fused",
    "rope_cos_sin",
    "rope_write_kv",
    "silu_mul",
    "swiglu_mlp",
    "swiglu_mlp_fused",
]
