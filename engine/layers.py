"""The per-token pieces of a Llama decoder layer, shared by the engine and its reference.

Attention is the only part that differs between the two (paged kernels over a KV pool vs a
full causal softmax), so it is not here. Norms and rotary run in float32 and round to the
activation dtype, as the usual Llama implementations do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """[tokens, hidden] -> [tokens, hidden], same dtype."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * weight.float()).to(x.dtype)


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 cos and sin, [tokens, head_dim // 2] each, for absolute positions [tokens]."""
    inv_freq = theta ** (
        -torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    )
    angles = positions.float()[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate [tokens, heads, head_dim] by position (halves convention, as Llama's HF port)."""
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def swiglu_mlp(h: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """[tokens, hidden] -> [tokens, hidden] (this rank's partial sum under TP)."""
    gate, up = F.linear(h, w_gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w_down)
