"""Attention over the paged pool: decode through kernels/paged_decode, prefill chunks through
kernels/paged_prefill; `paged_prefill_torch` (gather + SDPA) is the plain-torch reference path.

A prefill chunk of n new tokens after c cached ones attends causally, aligned bottom-right:
new token j (position c + j) sees positions 0 .. c + j. The chunk's own K/V are already in
the pool when attention runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from kernels.paged_decode import paged_decode_attention
from kernels.paged_prefill import PrefillPlan, paged_prefill_attention, plan_prefill
from kernels.reference import gather_kv


def paged_prefill_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    *,
    sm_scale: float | None = None,
    out: torch.Tensor | None = None,
    plan: object = None,
    check_bounds: bool = True,
) -> torch.Tensor:
    """Varlen chunked prefill over a paged context, in plain torch (one SDPA per chunk).

    q [total_new, H_q, D]; block_tables [chunks, max_pages] int32; cu_seqlens_q [chunks + 1]
    int32 offsets of each chunk's rows in q; seq_lens [chunks] int32 = context + chunk tokens.
    Returns out [total_new, H_q, D]. `plan` and `check_bounds` are the kernel's and are ignored.
    """
    out = torch.empty_like(q) if out is None else out
    group = q.shape[1] // k_cache.shape[1]
    starts = cu_seqlens_q.tolist()
    for i, total in enumerate(seq_lens.tolist()):
        a, b = starts[i], starts[i + 1]
        k = gather_kv(k_cache, block_tables[i], total).transpose(0, 1)  # [H_kv, total, D]
        v = gather_kv(v_cache, block_tables[i], total).transpose(0, 1)
        qi = q[a:b].transpose(0, 1)  # [H_q, n, D]
        o = F.scaled_dot_product_attention(
            qi[None],
            k.repeat_interleave(group, dim=0)[None],
            v.repeat_interleave(group, dim=0)[None],
            attn_mask=causal_lower_right(b - a, total),
            scale=sm_scale,
        )
        out[a:b] = o[0].transpose(0, 1)
    return out


class TorchPrefillLaunch:
    """`paged_prefill_torch` prepared as the kernel's launches are (`prepare_prefill`): bound to
    the step's tables once, issued per layer with that layer's K/V."""

    def __init__(self, q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, **kw):
        self.tables, self.lens, self.cu = block_tables, seq_lens, cu_seqlens_q
        self.q, self.out = q, kw.get("out")

    def launch(self, k_cache, v_cache, q=None, out=None):
        q = self.q if q is None else q
        out = self.out if out is None else out
        return paged_prefill_torch(q, k_cache, v_cache, self.tables, self.lens, self.cu, out=out)

    __call__ = launch


# The torch reference path in `prepare_prefill`'s shape (the model's test double).
prepare_prefill_torch = TorchPrefillLaunch


PREFILL_BACKEND = "triton"  # paged_prefill_attention: the Triton kernel (the torch path: tests)


def prefill_plan(
    q_lens: list[int], seq_lens: list[int], num_kv_heads: int, group: int, device
) -> PrefillPlan | None:
    """The kernel's host-side work list, built once per step and reused by every layer."""
    if not q_lens:
        return None
    return plan_prefill(q_lens, seq_lens, num_kv_heads, group, device=device)


__all__ = [
    "paged_decode_attention",
    "paged_prefill_attention",
    "paged_prefill_torch",
    "prefill_plan",
    "prepare_prefill_torch",
]
