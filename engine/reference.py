"""Plain-torch forward of the same weights: one whole sequence, no paging, no KV cache.

Shares the per-token pieces (engine/layers.py) with the engine; attention is a dense causal
softmax in float32 over the full sequence, so paging, chunking, prefix reuse and the kernels
are all outside what it shares.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from engine.layers import apply_rope, rms_norm, rope_cos_sin, swiglu_mlp
from engine.shape import ModelShape
from engine.weights import Weights


def _causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q [T, H_q, D], k/v [T, H_kv, D] -> [T, H_q, D] in q's dtype; float32 softmax."""
    t, hq, d = q.shape
    group = hq // k.shape[1]
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), kf) / math.sqrt(d)
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, vf).to(q.dtype)


@torch.inference_mode()
def reference_logits(shape: ModelShape, weights: Weights, tokens: torch.Tensor) -> torch.Tensor:
    """Logits [T, vocab] (bf16) at every position of one sequence of token ids [T]."""
    s, d = shape, shape.head_dim
    x = F.embedding(tokens, weights.embed)
    cos, sin = rope_cos_sin(torch.arange(tokens.shape[0], device=tokens.device), d, s.rope_theta)
    for w in weights.layers:
        h = rms_norm(x, w.attn_norm, s.rms_eps)
        q, k, v = F.linear(h, w.wqkv).split(
            [s.num_q_heads * d, s.num_kv_heads * d, s.num_kv_heads * d], dim=-1
        )
        q = apply_rope(q.reshape(-1, s.num_q_heads, d), cos, sin)
        k = apply_rope(k.reshape(-1, s.num_kv_heads, d), cos, sin)
        attn = _causal_attention(q, k, v.reshape(-1, s.num_kv_heads, d))
        x = x + F.linear(attn.reshape(-1, s.num_q_heads * d), w.wo)
        x = x + swiglu_mlp(rms_norm(x, w.mlp_norm, s.rms_eps), w.w_gate_up, w.w_down)
    return F.linear(rms_norm(x, weights.final_norm, s.rms_eps), weights.lm_head)
