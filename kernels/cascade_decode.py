"""Shared-prefix (cascade) decode attention: shared pages read once per group, tails per sequence.

A decode batch in which groups of sequences share their leading pages (a prefix-cache hit:
same system prompt, same document) is computed in three launches:
  1. prefix pass: for every group, all query heads of all its sequences attend to the shared
     pages as one tl.dot M dimension (kernels.paged_prefill, causal=False, one "query token" per
     sequence: row = sequence x query head of a KV group), so each shared K/V tile is loaded once
     for up to BLOCK_M / group-size sequences instead of once per sequence;
  2. tail pass: kernels.paged_decode over each sequence's unique pages (its block table shifted
     past the prefix), returning (out, log-sum-exp);
  3. merge: the two partial softmaxes combined by log-sum-exp (`_merge_kernel`).

Layout: as kernels.paged_decode. Sequences of a group must be contiguous in the batch; the
shared prefix of a group is a whole number of pages and shorter than every member (each
sequence keeps >= 1 token of its own, as its newest token's page is never shared).
`plan_cascade` builds the launch description on the host from the full block tables.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.paged_decode import DEFAULT_CONFIG, paged_decode_attention  # noqa: E402
from kernels.paged_prefill import PrefillPlan, paged_prefill_attention, plan_prefill  # noqa: E402

# The prefix pass: few programs' worth of work, so split keys until ~1 program per SM. 64-row
# tiles, 4 warps, 2 stages (session 5, H200, seed mix with 80 sharing 2,048 tokens): the pass
# alone 0.0359 -> 0.0324 ms, and 9 us less inside the cascade (its programs leave room on the
# SMs for the tails' beside them) than 128-row tiles, 8 warps, 3 stages.
DEFAULT_PREFIX_CONFIG = {
    "block_m": 64,
    "block_n": 64,
    "num_warps": 4,
    "num_stages": 2,
    "programs_per_sm": 1,
    "min_split_tokens": 256,
}


@triton.jit
def _merge_kernel(
    o_p_ptr,
    lse_p_ptr,
    o_t_ptr,
    lse_t_ptr,
    prefix_len_ptr,
    out_ptr,
    stride_pb,
    stride_ph,
    stride_lpb,
    stride_lph,
    stride_tb,
    stride_th,
    stride_ltb,
    stride_lth,
    stride_ob,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    NUM_HEADS: tl.constexpr,
):
    pid_b = tl.program_id(0)
    pid_h = tl.program_id(1)
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HEAD_DIM)
    mask_h = offs_h < NUM_HEADS
    o_t = tl.load(
        o_t_ptr + pid_b * stride_tb + offs_h[:, None] * stride_th + offs_d[None, :],
        mask=mask_h[:, None],
        other=0.0,
    )
    has_prefix = tl.load(prefix_len_ptr + pid_b) > 0
    if has_prefix:
        lse_t = tl.load(lse_t_ptr + pid_b * stride_ltb + offs_h * stride_lth, mask=mask_h, other=0)
        lse_p = tl.load(lse_p_ptr + pid_b * stride_lpb + offs_h * stride_lph, mask=mask_h, other=0)
        o_p = tl.load(
            o_p_ptr + pid_b * stride_pb + offs_h[:, None] * stride_ph + offs_d[None, :],
            mask=mask_h[:, None],
            other=0.0,
        )
        m = tl.maximum(lse_t, lse_p)
        w_t = tl.exp(lse_t - m)
        w_p = tl.exp(lse_p - m)
        o = (o_t * w_t[:, None] + o_p * w_p[:, None]) / (w_t + w_p)[:, None]
    else:
        o = o_t
    tl.store(
        out_ptr + pid_b * stride_ob + offs_h[:, None] * stride_oh + offs_d[None, :],
        o.to(out_ptr.dtype.element_ty),
        mask=mask_h[:, None],
    )


_SIDE_STREAMS: dict = {}


def _side_stream(dev: torch.device):
    """One side stream per device, reused (a new stream per call would leak under capture)."""
    key = dev.index if dev.index is not None else torch.cuda.current_device()
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(device=key)
    return _SIDE_STREAMS[key]


@dataclass
class CascadePlan:
    """Device tensors and host facts of one cascade launch (build with `plan_cascade`)."""

    group_starts: torch.Tensor  # [G + 1] int32: group g is sequences [gs[g], gs[g+1])
    prefix_tables: torch.Tensor  # [G, P] int32: the shared pages
    prefix_lens: torch.Tensor  # [G] int32: shared tokens (whole pages; 0 = no sharing)
    tail_tables: torch.Tensor  # [B, T] int32: each sequence's pages after its prefix
    tail_lens: torch.Tensor  # [B] int32: tokens after the prefix (>= 1)
    seq_prefix_lens: torch.Tensor  # [B] int32: the prefix length of each sequence's group
    prefix_plan: PrefillPlan
    max_tail: int
    total_tail: int
    shared_tokens: int  # prefix tokens, each counted once
    unique_tokens: int  # shared_tokens + tail tokens: what the cascade must read

    @property
    def batch(self) -> int:
        return int(self.tail_lens.shape[0])


def plan_cascade(
    block_tables: torch.Tensor | np.ndarray,
    seq_lens: torch.Tensor | np.ndarray | list[int],
    group_sizes: list[int],
    prefix_lens: list[int],
    page_size: int,
    num_kv_heads: int,
    group: int,
    *,
    device: torch.device | str = "cpu",
    check: bool = True,
    prefix_config: dict | None = None,
    tokens_per_split: int | None = None,
) -> CascadePlan:
    """Cascade description from the full block tables (host side, as a scheduler would build it).

    `group_sizes` partitions the batch into consecutive groups (sum = batch); group g shares its
    first `prefix_lens[g]` tokens (a multiple of page_size, 0 for none). With `check`, every
    member's leading table entries must equal the group's and the prefix must be shorter than
    every member; a ValueError says which does not hold.
    """
    tables = torch.as_tensor(block_tables).to("cpu", torch.int64).numpy()
    lens = np.asarray(torch.as_tensor(seq_lens).to("cpu", torch.int64).numpy(), dtype=np.int64)
    batch = lens.shape[0]
    if len(group_sizes) != len(prefix_lens):
        raise ValueError("group_sizes and prefix_lens must have one entry per group")
    if sum(group_sizes) != batch or any(g < 1 for g in group_sizes):
        raise ValueError(f"group_sizes {group_sizes} must be >= 1 each and sum to batch {batch}")
    starts = np.concatenate([[0], np.cumsum(group_sizes)]).astype(np.int64)
    pref = np.asarray(prefix_lens, dtype=np.int64)
    if np.any(pref < 0) or np.any(pref % page_size):
        raise ValueError(
            f"prefix_lens must be whole pages of {page_size} tokens, got {prefix_lens}"
        )
    seq_pref = np.repeat(pref, group_sizes)
    if check and np.any(seq_pref >= lens):
        b = int(np.argmax(seq_pref >= lens))
        raise ValueError(
            f"sequence {b} ({int(lens[b])} tokens) is not longer than its group's prefix "
            f"({int(seq_pref[b])}): every sequence keeps >= 1 token of its own"
        )
    n_pp = pref // page_size
    max_pp = max(1, int(n_pp.max(initial=0)))
    prefix_tables = np.zeros((len(group_sizes), max_pp), dtype=np.int64)
    for g in range(len(group_sizes)):
        s, e, p = int(starts[g]), int(starts[g + 1]), int(n_pp[g])
        prefix_tables[g, :p] = tables[s, :p]
        if check and p and not np.all(tables[s:e, :p] == tables[s, :p]):
            raise ValueError(f"group {g}: its sequences do not share their first {p} pages")
    tail = lens - seq_pref
    tail_pages = -(-tail // page_size)
    max_tp = max(1, int(tail_pages.max(initial=0)))
    tail_tables = np.zeros((batch, max_tp), dtype=np.int64)
    seq_pp = seq_pref // page_size
    for b in range(batch):
        tp = int(tail_pages[b])
        tail_tables[b, :tp] = tables[b, seq_pp[b] : seq_pp[b] + tp]
    cfg = {**DEFAULT_PREFIX_CONFIG, **(prefix_config or {})}
    prefix_plan = plan_prefill(
        np.asarray(group_sizes),
        pref,
        num_kv_heads,
        group,
        device=device,
        causal=False,
        block_m=cfg["block_m"],
        block_n=cfg["block_n"],
        programs_per_sm=cfg["programs_per_sm"],
        min_split_tokens=cfg["min_split_tokens"],
        tokens_per_split=tokens_per_split,
        num_sms=None if str(device) != "cpu" else 132,
    )

    def dev(a):
        return torch.as_tensor(a.astype(np.int32), device=device)

    return CascadePlan(
        group_starts=dev(starts),
        prefix_tables=dev(prefix_tables),
        prefix_lens=dev(pref),
        tail_tables=dev(tail_tables),
        tail_lens=dev(tail),
        seq_prefix_lens=dev(seq_pref),
        prefix_plan=prefix_plan,
        max_tail=int(tail.max(initial=1)),
        total_tail=int(tail.sum()),
        shared_tokens=int(pref.sum()),
        unique_tokens=int(pref.sum() + tail.sum()),
    )


def cascade_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: CascadePlan,
    *,
    sm_scale: float | None = None,
    out: torch.Tensor | None = None,
    check_bounds: bool = True,
    prefix_config: dict | None = None,
    decode_config: dict | None = None,
    overlap: bool | None = None,
) -> torch.Tensor:
    """Decode attention of q [batch, num_q_heads, head_dim] over shared prefixes + own tails.

    Equal (up to rounding) to kernels.paged_decode over the full block tables the plan was built
    from. Raises ValueError on bad input (the two passes' launchers validate their parts).
    `overlap` (default: on CUDA) runs the prefix pass on a side stream concurrently with the
    tail pass.
    """
    if q.dim() != 3 or q.shape[0] != plan.batch:
        raise ValueError(
            f"q must be [batch={plan.batch}, num_q_heads, head_dim], got {tuple(q.shape)}"
        )
    batch, num_q_heads, head_dim = q.shape
    pcfg = {**DEFAULT_PREFIX_CONFIG, **(prefix_config or {})}
    # The decode defaults, but num_stages left to the launcher (one tail: the single-sequence
    # rule's pipeline depth) unless given.
    dcfg = {k: v for k, v in DEFAULT_CONFIG.items() if k != "num_stages"}
    dcfg.update(decode_config or {})
    scale = (1.0 / math.sqrt(head_dim)) if sm_scale is None else float(sm_scale)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    elif out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"out must match q: {tuple(q.shape)} {q.dtype}, got {tuple(out.shape)}")
    if batch == 0:
        return out
    f32: dict[str, Any] = dict(dtype=torch.float32, device=q.device)
    o_p = torch.empty((batch, num_q_heads, head_dim), **f32)
    lse_p = torch.empty((batch, num_q_heads), **f32)
    o_t = torch.empty((batch, num_q_heads, head_dim), **f32)
    lse_t = torch.empty((batch, num_q_heads), **f32)

    def prefix_pass():
        paged_prefill_attention(
            q,
            k_cache,
            v_cache,
            plan.prefix_tables,
            plan.prefix_lens,
            plan.group_starts,
            sm_scale=scale,
            causal=False,
            out=o_p,
            lse_out=lse_p,
            plan=plan.prefix_plan,
            check_bounds=check_bounds,
            block_n=pcfg["block_n"],
            num_warps=pcfg["num_warps"],
            num_stages=pcfg["num_stages"],
        )

    def tail_pass():
        paged_decode_attention(
            q,
            k_cache,
            v_cache,
            plan.tail_tables,
            plan.tail_lens,
            sm_scale=scale,
            out=o_t,
            lse_out=lse_t,
            max_seq_len=plan.max_tail,
            total_tokens=plan.total_tail,
            check_bounds=check_bounds,
            **dcfg,
        )

    if overlap is None:
        overlap = q.device.type == "cuda"
    if plan.shared_tokens and overlap:
        # The prefix pass (compute-bound, few programs) runs on a side stream beside the tails
        # (bandwidth-bound); both only read q and the pool, and the merge waits for both.
        # Works under CUDA-graph capture (a fork and a join in the graph).
        main = torch.cuda.current_stream(q.device)
        side = _side_stream(q.device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            prefix_pass()
        tail_pass()
        main.wait_stream(side)
    else:
        if plan.shared_tokens:
            prefix_pass()
        tail_pass()
    block_h = min(16, triton.next_power_of_2(num_q_heads))
    _merge_kernel[(batch, triton.cdiv(num_q_heads, block_h))](
        o_p,
        lse_p,
        o_t,
        lse_t,
        plan.seq_prefix_lens,
        out,
        o_p.stride(0),
        o_p.stride(1),
        lse_p.stride(0),
        lse_p.stride(1),
        o_t.stride(0),
        o_t.stride(1),
        lse_t.stride(0),
        lse_t.stride(1),
        out.stride(0),
        out.stride(1),
        HEAD_DIM=head_dim,
        BLOCK_H=block_h,
        NUM_HEADS=num_q_heads,
        num_warps=4,
    )
    return out
