"""GQA-grouped chunked-prefill attention over a paged KV pool, in Triton.

A batch of chunks (varlen): request b brings n_b new query tokens; its KV cache holds L_b tokens,
the c_b = L_b - n_b cached ones followed by the chunk's own n_b, all already written into the
pool's pages. The kernel reads context and chunk uniformly through the block table.

Layout (all tensors on one device):
    q            [total_new, num_q_heads, head_dim]   bf16 or fp16, requests packed back to back
    cu_seqlens_q [batch + 1] int32: request b's queries are q[cu[b]:cu[b+1]] (cu[0] = 0)
    k_cache      [num_pages, num_kv_heads, page_size, head_dim] (as kernels.paged_decode)
    v_cache      same shape as k_cache
    block_tables [batch, max_pages] int32
    seq_lens     [batch] int32: L_b, tokens in the cache including the chunk (L_b >= n_b)
    out          [total_new, num_q_heads, head_dim], q's dtype (or float32)
    lse_out      optional [total_new, num_q_heads] float32: natural-log sum-exp of the scores

Causal, bottom-right aligned: query i (0-based) of a chunk of n over L keys attends to keys
< L - n + i + 1. `causal=False` lets every query attend to all L_b keys (the shared-prefix pass of
kernels.cascade_decode uses that, with one "query token" per decoding sequence); non-causal
requests with L_b = 0 are skipped and their outputs are left unwritten.

GQA grouping: one program owns one (tile of BLOCK_Q query tokens, KV head, KV split). Its
tl.dot M dimension packs BLOCK_Q tokens x the group's query heads (row r = token r // GROUP_P,
head r % GROUP_P), so every K/V tile is loaded once for the whole group. fp32 accumulation,
exp2-domain softmax with log2(e) folded into the scale.

Work list: the launcher (or `plan_prefill`, which a caller can build once and reuse, e.g. under
CUDA-graph capture) cuts every request into query tiles and, when the tiles alone would not fill
the GPU (few new tokens over a long context), cuts each tile's keys into splits. Splits cut only
the keys every row of the tile may see, so each split holds at least one visible key for every
row; split partials (normalised output, log2-sum-exp) are merged by `_prefill_combine_kernel`.
Work items are ordered longest first so the tail of a ragged batch is short. With `pad_min_rows`
(session 12) such split tiles of a few tokens are padded to the 128 rows of the Gluon loops
(kernels.gluon_prefill), whose padding rows load and store nothing.
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
from triton.language.extra.cuda import gdc_wait  # noqa: E402

from kernels.launch import BoundLaunch  # noqa: E402
from kernels.paged_decode import (  # noqa: E402
    PDL_COMBINE,
    PreparedAttention,
    _check,
    _num_sms,
    check_pages_in_pool,
    check_q_and_cache,
    checked_outputs,
    pdl_options,
)

_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453
# Plan knobs (how the work is cut). Launch knobs (tile width, warps, stages, loop variant) come per
# work class from PREFILL_LAUNCH_CONFIGS, recorded in the plan (kernels/README.md, H200 sweep).
DEFAULT_PREFILL_CONFIG: dict[str, Any] = {
    "block_m": 128,  # rows of the tl.dot M dimension (query tokens x group heads)
    "programs_per_sm": None,  # split keys only while fewer programs than this per SM run;
    # None: 1 for tiles of >= 64 rows (long programs), 2 for smaller tiles (H200 sweep)
    "min_split_tokens": 256,
    # Split tiles of at least this many rows but fewer than block_m are padded to block_m rows
    # where the "split" class runs a Gluon loop (128-row tiles only), so few new tokens over a
    # long context take loop 2 (with WS_SKIP_IDLE) instead of the Triton kernel; 0: off. H200
    # sweep of 2026-12-01 07:31 UTC (session 12, measurements/bench_small_s12_call1.json,
    # prepared launches, mean of two passes), ms at 64 q / 8 KV heads, off -> 16: 2 / 4 / 8
    # tokens over 32K 0.0535 / 0.0560 / 0.0663 -> 0.0516 / 0.0518 / 0.0528, over 8K 0.0255 /
    # 0.0277 / 0.0294 -> 0.0232 / 0.0236 / 0.0247, 4 / 8 over 2K 0.0222 / 0.0232 -> 0.0188 /
    # 0.0194; at 32 q / 8 KV, 8 / 16 over 32K 0.0580 / 0.0660 -> 0.0519 / 0.0530.
    "pad_min_rows": 16,
}
# Work classes: "tiles" = the query tiles fill the GPU (chunks of hundreds of tokens and more:
# compute-bound); "tiles_wide" = the same with WIDE_BLOCK_M-row tiles (causal chunks whose wide
# tiles still give at least one program per SM); "split" = few tiles over long context, keys
# split across programs + combine; "split_small" = the same with tiles of < 64 rows (1-4 new
# tokens at GQA 8: decode-like; since session 12 only where pad_min_rows does not pad them).
# warp_specialize: tl.range(..., warp_specialize=True) on the unmasked loop (Triton's Hopper
# warp specialisation; under Triton 3.6 it leaves the TTGIR of these pointer-gathered loads
# unchanged: its Hopper warp specialisation wants TMA loads); lazy_rescale: rescale acc/l only
# when a row max grew by > 2^8.
# split_programs_per_sm (split classes, optional): programs per SM the split count aims at.
# block_m ("tiles_wide" only): its tile rows; <= the plan's block_m turns the class off.
# gluon: the class's tiles through kernels.gluon_prefill (Hopper, Gluon: P @ V of tile t-1 in
# flight while tile t's softmax runs; 1: one 8-warp partition, 2: warp-specialised, two consumer
# warpgroups and a copy partition; 3: loop 2 made persistent, session 8, slower from 4K on)
# where it can run, else the Triton kernel (0; session 7).
LAUNCH_KEYS = ("block_n", "num_warps", "num_stages", "warp_specialize", "lazy_rescale", "gluon")
CLASS_KEYS = (*LAUNCH_KEYS, "split_programs_per_sm", "block_m")
_BASE_LAUNCH: dict[str, Any] = {
    "block_n": 128,
    "num_warps": 8,
    "num_stages": 3,
    "warp_specialize": False,
    "lazy_rescale": False,
    "gluon": 0,
}
# The H200 sweep of 2026-11-30 09:16 UTC (kernels/README.md; measurements/
# bench_prefill_s3_tune.json): lazy rescale won "tiles" (8K chunk 2.80 -> 2.75 ms) and "split";
# warp_specialize changed little (2.7594 -> 2.7509 ms with lazy rescale); 4 warps won
# "split_small". "tiles_wide" is OFF (block_m 128 = the plan's rows): 256-row tiles, 64-key tiles,
# 16 warps, 2 stages won the session-3 probe on the article shard (8K chunk 2.73 -> 2.47 ms) but
# not across the calibrated shards (session 4, measurements/bench_wide_s4.json, wide / 128-row
# ms): 0.88-0.92 for 4K-8K chunks and 2K over 32K at 32 q / 4 KV heads, 1.11-1.17 for 2K
# chunks over 0-512 tokens, 1.04-1.14 for 2K-4K chunks at 32 q / 8 KV heads (geo-mean 1.008).
# Turn it on with set_prefill_launch_configs({"tiles_wide": {"block_m": 256}}).
# Session 7 (measurements/bench_prefill_tune_s7_call2.json, H200, 19:00 UTC): "tiles" and
# "split" run Gluon loop 2 (kernels/gluon_prefill.py: warp-specialised, two 64-row consumer
# warpgroups, 64-key tiles, 4 K/V stages) where Gluon and sm_90 are there, ms vs the Triton loop:
# tiles (0, 2K) 0.2268 -> 0.1847, (0, 8K) 2.7669 -> 2.3345, (8K, 2K) 1.4915 -> 1.3086, (32K, 2K)
# 5.6672 -> 4.7820; split (32K, 16) 0.0698 -> 0.0622, (32K, 64) 0.1862 -> 0.1543. Elsewhere
# (the CPU interpreter, other GPUs) the Triton kernel runs with the same block_n, stages, etc.
PREFILL_LAUNCH_CONFIGS: dict[str, dict[str, Any]] = {
    "tiles": dict(_BASE_LAUNCH, block_n=64, warp_specialize=True, lazy_rescale=True, gluon=2),
    "tiles_wide": dict(
        _BASE_LAUNCH, block_m=128, block_n=64, num_warps=16, num_stages=2, lazy_rescale=True
    ),  # fmt: skip
    # num_stages 5: the pipeliner gives the gathered K/V loads (after the block-table load) two
    # tiles of lead instead of one. Session 6 (measurements/bench_prefill_tune_s6.json, H200):
    # 16 / 64 tokens over 32K 0.0792 -> 0.0703 / 0.2030 -> 0.1843 ms, 16 over 8K 0.0392 ->
    # 0.0373; short contexts lose (16-64 tokens over 0-512: +3-12%, their programs hold 1-4 key
    # tiles). The compute-bound classes lose with it ("tiles" 8K chunk 2.738 -> 2.832 ms).
    "split": dict(_BASE_LAUNCH, block_n=64, num_stages=5, lazy_rescale=True, gluon=2),
    "split_small": dict(_BASE_LAUNCH, num_warps=4),
    # Every request brings exactly one new token (causal): that is a decode step, launched
    # through kernels.paged_decode (its own config; these keys are unused). Session 5.
    "decode": dict(_BASE_LAUNCH, num_warps=4),
}
# Route one-new-token batches to the decode kernel (work class "decode") when they hold at least
# DECODE_ROUTE_MIN_KEYS keys x KV heads. H200, 2026-11-30 13:55 UTC calibration, one token over c
# cached ones, ms at 4 / 8 KV heads: c = 32K 0.0546 -> 0.0393 / 0.0648 -> 0.0565, 8K 0.0299 ->
# 0.0272 / 0.0365 -> 0.0302; but c = 512-4K slower through the decode kernel (4 KV heads, 512:
# 0.0147 -> 0.0235: one unsplit 512-token program per KV head) and equal at 4K x 8 KV heads.
DECODE_ROUTE = True
DECODE_ROUTE_MIN_KEYS = 32768
# The split combine (one program per (tile, KV head, COMBINE_ROWS rows)) merges COMBINE_SPLITS
# splits per step. Session 10 (opt-in): 16 new tokens over 32K are 16 splits of one 128-row
# tile per KV head, i.e. 64 programs each loading 16 partials one after another; 2 rows x 16
# splits a program gives 512 programs of one load each.
COMBINE_ROWS = 16
COMBINE_SPLITS = 1
# Session 11: the combine's shape by the plan's most splits per tile, {fewest splits: (rows,
# splits per load)}; the largest key <= the plan's count wins, none: (COMBINE_ROWS,
# COMBINE_SPLITS). H200 sweep of 2026-12-01 04:20 UTC (measurements/bench_small_s11_call1.json,
# prepared launches, mean of two passes), ms, 16 x 1 -> 2 x 16 -> 1 x 32: 33 splits (2 / 4
# tokens over 32K) 0.0606 -> 0.0554 -> 0.0536 / 0.0702 -> 0.0574 -> 0.0558, (4 over 8K) 0.0414
# -> 0.0285 -> 0.0275; 15-16 splits (8 / 16 tokens over 32K) 0.0728 -> 0.0665 / 0.0624 ->
# 0.0577, (16 over 8K) 0.0322 -> 0.0284; 11 splits (48 over 32K) 0.1308 / 0.1313; 8 and 4
# splits (24-32 and 64 tokens): 16 x 1 fastest by 3-20%.
COMBINE_BY_SPLITS: dict[int, tuple[int, int]] = {12: (2, 16), 32: (1, 32)}
_WORK_COLS = 5  # req, q_start, kv_start, kv_end, slot (-1: write out directly)
_COMB_COLS = 4  # req, q_start, first_slot, n_splits


# Options tried and removed, at the value that turned them off: configs recorded while they
# existed (session 6's tune outputs, h200.json's launch_configs) still load.
RETIRED_KEYS = {"poly_exp2": 0}


def set_prefill_launch_configs(table: dict[str, dict[str, Any]]) -> None:
    """Replace the per-class launch configs (tuning and calibration runs; keys as above)."""
    for cls, cfg in table.items():
        if cls not in PREFILL_LAUNCH_CONFIGS:
            raise ValueError(f"unknown work class {cls!r}: one of {sorted(PREFILL_LAUNCH_CONFIGS)}")
        cfg = {k: v for k, v in cfg.items() if RETIRED_KEYS.get(k, object()) != v}
        bad = set(cfg) - set(CLASS_KEYS)
        if bad:
            raise ValueError(f"unknown launch keys {sorted(bad)}: {CLASS_KEYS}")
        PREFILL_LAUNCH_CONFIGS[cls] = {**PREFILL_LAUNCH_CONFIGS[cls], **cfg}


@triton.jit
def _attend_tile(
    acc,
    m_i,
    l_i,
    q,
    k_head_ptr,
    v_head_ptr,
    table_ptr,
    tok0,
    kv_end,
    pos,
    offs_n,
    offs_d,
    qk_scale,
    stride_kp,
    stride_kt,
    stride_vp,
    stride_vt,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    LAZY_RESCALE: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """One key tile [tok0, tok0 + BLOCK_N) (tok0 % BLOCK_N == 0) folded into (acc, m_i, l_i)."""
    offs_t = tok0 + offs_n
    mask_t = offs_t < kv_end
    if BLOCK_N >= PAGE_SIZE:
        # Whole pages per tile: one table entry per page run, the in-page slot loop-invariant.
        pidx = tok0 // PAGE_SIZE + offs_n // PAGE_SIZE
        if MASKED:
            page = tl.load(table_ptr + pidx, mask=mask_t, other=0).to(tl.int64)
        else:
            page = tl.load(table_ptr + pidx).to(tl.int64)
        slot = offs_n % PAGE_SIZE
    else:
        # The tile lies inside one page: one table entry, BLOCK_N contiguous rows.
        page = tl.load(table_ptr + tok0 // PAGE_SIZE).to(tl.int64)
        slot = tok0 % PAGE_SIZE + offs_n
    k_rows = page * stride_kp + slot * stride_kt
    v_rows = page * stride_vp + slot * stride_vt
    if MASKED:
        k = tl.load(k_head_ptr + k_rows[:, None] + offs_d[None, :], mask=mask_t[:, None], other=0.0)
    else:
        k = tl.load(k_head_ptr + k_rows[:, None] + offs_d[None, :])
    s = tl.dot(q, tl.trans(k.to(tl.float32))) if UPCAST_DOT else tl.dot(q, tl.trans(k))
    if MASKED:
        visible = mask_t[None, :] & (offs_t[None, :] <= pos[:, None]) if CAUSAL else mask_t[None, :]
        s = tl.where(visible, s, float("-inf"))
    # Scale folded into one FMA with the max subtraction (qk_scale > 0 keeps the argmax).
    m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
    if LAZY_RESCALE:
        # Keep the stale max unless some row's grew by more than 8 (P <= 2^8: exact enough in
        # fp32 and bf16); the rescale of acc and l then runs on few tiles.
        if tl.max(m_new - m_i, axis=0) > 8.0:
            alpha = tl.exp2(m_i - m_new)
            acc = acc * alpha[:, None]
            l_i = l_i * alpha
            m_i = m_new
        p = tl.exp2(s * qk_scale - m_i[:, None])
        l_i = l_i + tl.sum(p, axis=1)
    else:
        p = tl.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        m_i = m_new
    if MASKED:
        v = tl.load(v_head_ptr + v_rows[:, None] + offs_d[None, :], mask=mask_t[:, None], other=0.0)
    else:
        v = tl.load(v_head_ptr + v_rows[:, None] + offs_d[None, :])
    p = p.to(v.dtype)
    if UPCAST_DOT:
        p, v = p.to(tl.float32), v.to(tl.float32)
    acc = tl.dot(p, v, acc)  # accumulate in the MMA itself
    return acc, m_i, l_i


@triton.jit
def _paged_prefill_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    cu_q_ptr,
    work_ptr,
    out_ptr,
    lse_ptr,
    part_out_ptr,
    part_lse_ptr,
    qk_scale,
    stride_qt,
    stride_qh,
    stride_kp,
    stride_kh,
    stride_kt,
    stride_vp,
    stride_vh,
    stride_vt,
    stride_btb,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    stride_pos,
    stride_poh,
    stride_pls,
    stride_plh,
    GROUP: tl.constexpr,
    GROUP_P: tl.constexpr,  # GROUP rounded up to a power of two
    BLOCK_Q: tl.constexpr,  # query tokens per program; BLOCK_Q * GROUP_P rows
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    CAUSAL: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    LAZY_RESCALE: tl.constexpr,
):
    BLOCK_M: tl.constexpr = BLOCK_Q * GROUP_P
    pid_w = tl.program_id(0)
    kv_head = tl.program_id(1)
    w = work_ptr + pid_w * 5
    req = tl.load(w)
    q_start = tl.load(w + 1)
    kv_start = tl.load(w + 2)
    kv_end = tl.load(w + 3)
    slot = tl.load(w + 4)

    q_begin = tl.load(cu_q_ptr + req)
    n_new = tl.load(cu_q_ptr + req + 1) - q_begin
    seq_len = tl.load(seq_lens_ptr + req)
    ctx = seq_len - n_new

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    tok = q_start + offs_m // GROUP_P  # chunk-relative query index of each row
    head = kv_head * GROUP + offs_m % GROUP_P
    row_ok = (tok < n_new) & ((offs_m % GROUP_P) < GROUP)
    q_rows = (q_begin + tok).to(tl.int64) * stride_qt + head * stride_qh
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    if UPCAST_DOT:
        q = q.to(tl.float32)
    pos = ctx + tok  # each row's query position: it sees keys <= pos

    k_head_ptr = k_cache_ptr + kv_head * stride_kh
    v_head_ptr = v_cache_ptr + kv_head * stride_vh
    table_ptr = block_tables_ptr + req * stride_btb

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    # Keys every row may see (all < the first row's position + 1): no mask but the tile edge.
    free_end = tl.minimum(kv_end, ctx + q_start + 1) if CAUSAL else kv_end
    free_end = kv_start + ((free_end - kv_start) // BLOCK_N) * BLOCK_N
    if WARP_SPECIALIZE:
        for tok0 in tl.range(kv_start, free_end, BLOCK_N, warp_specialize=True):
            acc, m_i, l_i = _attend_tile(
                acc, m_i, l_i, q, k_head_ptr, v_head_ptr, table_ptr, tok0, kv_end, pos,
                offs_n, offs_d, qk_scale, stride_kp, stride_kt, stride_vp, stride_vt,
                PAGE_SIZE, BLOCK_N, False, CAUSAL, LAZY_RESCALE, UPCAST_DOT,
            )  # fmt: skip
    else:
        for tok0 in range(kv_start, free_end, BLOCK_N):
            acc, m_i, l_i = _attend_tile(
                acc, m_i, l_i, q, k_head_ptr, v_head_ptr, table_ptr, tok0, kv_end, pos,
                offs_n, offs_d, qk_scale, stride_kp, stride_kt, stride_vp, stride_vt,
                PAGE_SIZE, BLOCK_N, False, CAUSAL, LAZY_RESCALE, UPCAST_DOT,
            )  # fmt: skip
    # The rest: the range edge and (causal) the diagonal, masked per row.
    for tok0 in range(free_end, kv_end, BLOCK_N):
        acc, m_i, l_i = _attend_tile(
            acc, m_i, l_i, q, k_head_ptr, v_head_ptr, table_ptr, tok0, kv_end, pos,
            offs_n, offs_d, qk_scale, stride_kp, stride_kt, stride_vp, stride_vt,
            PAGE_SIZE, BLOCK_N, True, CAUSAL, LAZY_RESCALE, UPCAST_DOT,
        )  # fmt: skip

    # Every row sees >= 1 key of every work item (the plan guarantees it), so l_i > 0.
    acc = acc / l_i[:, None]
    lse2 = m_i + tl.log2(l_i)
    if slot < 0:
        o_rows = (q_begin + tok).to(tl.int64) * stride_ot + head * stride_oh
        tl.store(
            out_ptr + o_rows[:, None] + offs_d[None, :],
            acc.to(out_ptr.dtype.element_ty),
            mask=row_ok[:, None],
        )
        if WRITE_LSE:
            l_rows = (q_begin + tok).to(tl.int64) * stride_lt + head * stride_lh
            tl.store(lse_ptr + l_rows, lse2 * 0.6931471805599453, mask=row_ok)
    else:
        po = part_out_ptr + slot.to(tl.int64) * stride_pos + kv_head * stride_poh
        tl.store(po + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=row_ok[:, None])
        pl = part_lse_ptr + slot.to(tl.int64) * stride_pls + kv_head * stride_plh
        tl.store(pl + offs_m, lse2, mask=row_ok)


@triton.jit
def _prefill_combine_kernel(
    cu_q_ptr,
    comb_ptr,
    out_ptr,
    lse_ptr,
    part_out_ptr,
    part_lse_ptr,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    stride_pos,
    stride_poh,
    stride_pls,
    stride_plh,
    GROUP: tl.constexpr,
    GROUP_P: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    BLOCK_R: tl.constexpr,  # rows of the tile per program (BLOCK_Q * GROUP_P is a multiple)
    BLOCK_S: tl.constexpr = 1,  # splits merged per step (> 1: one [splits, rows, d] load each)
    PDL_WAIT: tl.constexpr = False,  # launched as a programmatic dependent of the main kernel
):
    if PDL_WAIT:
        gdc_wait()  # the main kernel's partials are complete and visible past this point
    pid = tl.program_id(0)
    kv_head = tl.program_id(1)
    row0 = tl.program_id(2) * BLOCK_R
    c = comb_ptr + pid * 4
    req = tl.load(c)
    q_start = tl.load(c + 1)
    first = tl.load(c + 2)
    n_splits = tl.load(c + 3)
    q_begin = tl.load(cu_q_ptr + req)
    n_new = tl.load(cu_q_ptr + req + 1) - q_begin

    offs_m = row0 + tl.arange(0, BLOCK_R)
    offs_d = tl.arange(0, HEAD_DIM)
    tok = q_start + offs_m // GROUP_P
    head = kv_head * GROUP + offs_m % GROUP_P
    row_ok = (tok < n_new) & ((offs_m % GROUP_P) < GROUP)

    m = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
    wsum = tl.zeros([BLOCK_R], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R, HEAD_DIM], dtype=tl.float32)
    if BLOCK_S > 1:
        # BLOCK_S splits' partials in one load, so a program's loads are not a chain of
        # n_splits small ones (session 10, opt-in: COMBINE_SPLITS).
        offs_s = tl.arange(0, BLOCK_S)
        for s0 in range(0, n_splits, BLOCK_S):
            sl = (first + s0 + offs_s).to(tl.int64)
            ok = ((s0 + offs_s) < n_splits)[:, None] & row_ok[None, :]  # [BLOCK_S, BLOCK_R]
            lse_s = tl.load(
                part_lse_ptr + sl[:, None] * stride_pls + kv_head * stride_plh + offs_m[None, :],
                mask=ok,
                other=float("-inf"),
            )
            lse_s = tl.where(row_ok[None, :], lse_s, 0.0)  # rows outside the tile: finite
            part_s = tl.load(
                part_out_ptr
                + sl[:, None, None] * stride_pos
                + kv_head * stride_poh
                + offs_m[None, :, None] * HEAD_DIM
                + offs_d[None, None, :],
                mask=ok[:, :, None],
                other=0.0,
            )
            m_new = tl.maximum(m, tl.max(lse_s, axis=0))
            a = tl.exp2(m - m_new)
            w = tl.exp2(lse_s - m_new[None, :])  # 0 for splits past n_splits
            acc = acc * a[:, None] + tl.sum(part_s * w[:, :, None], axis=0)
            wsum = wsum * a + tl.sum(w, axis=0)
            m = m_new
        n_splits = 0  # merged: the one-split loop below runs no step
    for s in range(0, n_splits):
        sl = (first + s).to(tl.int64)
        lse = tl.load(
            part_lse_ptr + sl * stride_pls + kv_head * stride_plh + offs_m, mask=row_ok, other=0.0
        )
        part = tl.load(
            part_out_ptr
            + sl * stride_pos
            + kv_head * stride_poh
            + offs_m[:, None] * HEAD_DIM
            + offs_d[None, :],
            mask=row_ok[:, None],
            other=0.0,
        )
        m_new = tl.maximum(m, lse)
        a = tl.exp2(m - m_new)
        b = tl.exp2(lse - m_new)
        acc = acc * a[:, None] + part * b[:, None]
        wsum = wsum * a + b
        m = m_new
    o = acc / wsum[:, None]
    o_rows = (q_begin + tok).to(tl.int64) * stride_ot + head * stride_oh
    tl.store(
        out_ptr + o_rows[:, None] + offs_d[None, :],
        o.to(out_ptr.dtype.element_ty),
        mask=row_ok[:, None],
    )
    if WRITE_LSE:
        l_rows = (q_begin + tok).to(tl.int64) * stride_lt + head * stride_lh
        tl.store(lse_ptr + l_rows, (m + tl.log2(wsum)) * 0.6931471805599453, mask=row_ok)


@dataclass
class PrefillPlan:
    """The work list of one launch: build once per batch composition, reuse across layers."""

    work: torch.Tensor  # [W, 5] int32: req, q_start, kv_start, kv_end, slot
    combine: torch.Tensor  # [C, 4] int32: req, q_start, first_slot, n_splits
    n_slots: int
    block_q: int
    group_p: int
    tokens_per_split: int  # 0: no tile was split
    causal: bool
    total_new: int
    max_seq_len: int = 0  # the longest request's keys (the "decode" class's launch hint)
    total_keys: int = 0  # keys summed over the requests
    # The launch config of the plan's work class (PREFILL_LAUNCH_CONFIGS), chosen with the plan.
    work_class: str = "tiles"
    block_n: int = 128
    num_warps: int = 8
    num_stages: int = 3
    warp_specialize: bool = False
    lazy_rescale: bool = False
    gluon: int = 0
    max_splits: int = 1  # the most key splits of one query tile (the split combine's shape)
    max_new: int = 0  # the longest chunk's new tokens (0: unknown, every row of a tile used)

    @property
    def rows_used(self) -> int:
        """The most rows any tile holds (< block_m where chunks are shorter than a padded tile)."""
        return min(self.block_q, self.max_new or self.block_q) * self.group_p

    @property
    def block_m(self) -> int:
        return self.block_q * self.group_p

    def launch_config(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in LAUNCH_KEYS}


def choose_block_q(max_new: int, group_p: int, block_m: int) -> int:
    """Query tokens per tile: block_m rows' worth, but no more than the longest chunk needs
    (at least 16 rows in all, the tl.dot minimum)."""
    rows = min(block_m, max(16, triton.next_power_of_2(max(1, max_new) * group_p)))
    return max(1, rows // group_p)


def _split_pps(rows: int) -> int:
    """Programs per SM a split aims at by default: 2 for tiles under 64 rows (short programs),
    else 1 (H200 sweep)."""
    return 2 if rows < 64 else 1


GLUON_TILE_ROWS = 128  # the only tile the Gluon loops take (kernels/gluon_prefill.supports)


def _pads(rows: int, block_m: int, pad_min_rows: int, launch: dict[str, Any] | None) -> bool:
    """Whether a split tile of `rows` rows is padded to `block_m` (see pad_min_rows)."""
    gluon = {**PREFILL_LAUNCH_CONFIGS["split"], **(launch or {})}.get("gluon")
    return bool(gluon) and block_m == GLUON_TILE_ROWS and 0 < pad_min_rows <= rows < block_m


def _split_counts(first: np.ndarray, tps: int) -> np.ndarray:
    return np.maximum(1, -(-first // tps)) if tps else np.ones_like(first)


# Wave-aware split choice (`_split_length`): a program's fixed cost in key tiles (prologue, partial
# write), and how many waves a step's splits may take.
SPLIT_WAVE_OVERHEAD_TILES = 2
MAX_SPLIT_WAVES = 8
_SPLIT_TABLE_MAX = 1 << 16  # split lengths x tiles tabulated at once; longer: binary searches


def _split_length(
    need: np.ndarray, first: np.ndarray, num_kv_heads: int, target: int, bn: int, min_split: int
) -> int:
    """Key-split length (tokens, a multiple of bn) for tiles that alone leave SMs idle.

    For w = 1, 2, ... waves of `target` programs: the shortest split (>= min_split and >= the
    work over w waves) whose programs fit in w waves; its cost is the waves it takes times its
    longest program (split tiles + a fixed SPLIT_WAVE_OVERHEAD_TILES). One wave unless more
    waves cut that cost by > 5% (each further wave must gain 5% on the best so far): e.g. 72
    tiles of 17K keys on 132 SMs run unsplit in one wave (2 splits each would be 144 programs,
    a second wave as long as the first) but take 3 waves of 5 splits each (0.64 of the time)."""
    work_tokens = int(need.sum()) * num_kv_heads
    top = -(-int(first.max()) // bn)  # unsplit: every tile in one piece
    if top * first.size <= _SPLIT_TABLE_MAX:
        # Programs for every split length at once (one numpy pass instead of a search per wave).
        units = np.arange(1, top + 1, dtype=np.int64)
        table = np.maximum(1, -(-first[None, :] // (units[:, None] * bn))).sum(axis=1)
        table *= num_kv_heads

        def programs(u: int) -> int:
            return int(table[u - 1])

        def shortest(lo: int, limit: int) -> int:
            fits = table[lo - 1 :] <= limit  # non-increasing programs: a suffix fits
            return lo + int(np.argmax(fits))  # programs(top) <= target <= limit: one fits
    else:

        def programs(u: int) -> int:
            return int(_split_counts(first, u * bn).sum()) * num_kv_heads

        def shortest(lo: int, limit: int) -> int:
            if programs(lo) <= limit:
                return lo
            hi = top
            while hi - lo > 1:  # programs(hi) <= limit < programs(lo)
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if programs(mid) <= limit else (mid, hi)
            return hi

    best_cost, best_units = 0.0, top
    for waves in range(1, MAX_SPLIT_WAVES + 1):
        limit = waves * target
        floor = max(min_split, -(-work_tokens // limit))
        lo = shortest(min(-(-floor // bn), top), limit)
        cost = -(-programs(lo) // target) * (lo + SPLIT_WAVE_OVERHEAD_TILES)
        if waves == 1 or cost < 0.95 * best_cost:
            best_cost, best_units = cost, lo
        if lo * bn <= min_split:
            break  # splits cannot get shorter
    return best_units * bn


def _query_tiles(
    q_lens: np.ndarray, seq_lens: np.ndarray, block_q: int, causal: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every query tile of block_q tokens: (request, first query, keys its last row sees, keys
    every row sees)."""
    reqs, starts, needs, firsts = [], [], [], []
    for b, (n, L) in enumerate(zip(q_lens.tolist(), seq_lens.tolist(), strict=True)):
        ctx = L - n
        if L == 0:
            continue  # non-causal over no keys: nothing to do (cascade: no shared prefix)
        for qs in range(0, n, block_q):
            reqs.append(b)
            starts.append(qs)
            if causal:
                needs.append(min(L, ctx + qs + block_q))  # keys the tile's last row sees
                firsts.append(ctx + qs + 1)  # keys every row of the tile sees
            else:
                needs.append(L)
                firsts.append(L)
    arrays = (reqs, starts, needs, firsts)
    return tuple(np.asarray(a, dtype=np.int64) for a in arrays)  # type: ignore[return-value]


def plan_prefill(
    q_lens: list[int] | np.ndarray,
    seq_lens: list[int] | np.ndarray,
    num_kv_heads: int,
    group: int,
    *,
    device: torch.device | str = "cpu",
    causal: bool = True,
    block_m: int = DEFAULT_PREFILL_CONFIG["block_m"],
    block_n: int | None = None,
    programs_per_sm: int | None = DEFAULT_PREFILL_CONFIG["programs_per_sm"],
    min_split_tokens: int = DEFAULT_PREFILL_CONFIG["min_split_tokens"],
    tokens_per_split: int | None = None,
    num_sms: int | None = None,
    launch: dict[str, Any] | None = None,
    pad_min_rows: int = DEFAULT_PREFILL_CONFIG["pad_min_rows"],
) -> PrefillPlan:
    """Host-side work list for `paged_prefill_attention` (see the module docstring).

    `tokens_per_split` forces the key-split length (tests use it to exercise the combine pass);
    otherwise keys are split only when the query tiles give fewer than `programs_per_sm` programs
    per SM, into pieces of at least `min_split_tokens`, as few as keep every program in one wave
    (<= programs_per_sm x SMs programs). The plan records the launch config of its work class
    ("split" or "tiles", PREFILL_LAUNCH_CONFIGS); `block_n` and `launch` override it.
    `pad_min_rows`: see DEFAULT_PREFILL_CONFIG.
    """
    q_lens = np.asarray(q_lens, dtype=np.int64)
    seq_lens = np.asarray(seq_lens, dtype=np.int64)
    if q_lens.shape != seq_lens.shape:
        raise ValueError(f"q_lens {q_lens.shape} and seq_lens {seq_lens.shape} differ in length")
    if np.any(q_lens < 0) or np.any(seq_lens < 0):
        raise ValueError("new tokens and seq_lens must be >= 0")
    if causal and np.any(seq_lens < q_lens):
        raise ValueError("causal: seq_lens must count the chunk's own tokens (>= new tokens)")
    group_p = triton.next_power_of_2(group)
    if block_m < group_p or block_m < 16:
        raise ValueError(f"block_m {block_m} must be >= 16 and >= the padded group {group_p}")
    if launch and set(launch) - set(CLASS_KEYS):
        raise ValueError(f"unknown launch keys {sorted(set(launch) - set(CLASS_KEYS))}")
    block_q = choose_block_q(int(q_lens.max(initial=0)), group_p, block_m)

    reqs_a, starts_a, need, first = _query_tiles(q_lens, seq_lens, block_q, causal)

    target = 0
    sms, pps = 132, 1
    if tokens_per_split is None:
        if num_sms is not None:
            sms = num_sms
        elif str(device) != "cpu":
            sms = _num_sms(torch.device(device))
        pps = programs_per_sm if programs_per_sm is not None else _split_pps(block_q * group_p)
        split = 0 < len(reqs_a) * num_kv_heads < max(1, pps * sms)
    else:
        if tokens_per_split < 1:
            raise ValueError(f"tokens_per_split must be >= 1, got {tokens_per_split}")
        split = True
    work_class = "tiles"
    if split:
        work_class = "split" if block_q * group_p >= 64 else "split_small"
    if (
        DECODE_ROUTE
        and causal
        and q_lens.size
        and bool(np.all(q_lens == 1))
        and tokens_per_split is None
        and not set(launch or {}) & set(LAUNCH_KEYS)  # no forced prefill launch knobs
        and int(seq_lens.sum()) * num_kv_heads >= DECODE_ROUTE_MIN_KEYS
    ):
        work_class = "decode"
    elif causal and tokens_per_split is None and not (launch and "block_m" in launch):
        # Wider tiles where they still fill the GPU (at least one program per SM).
        wide_m = int(PREFILL_LAUNCH_CONFIGS["tiles_wide"].get("block_m") or 0)
        if wide_m > block_m and wide_m >= group_p:
            wide_q = choose_block_q(int(q_lens.max(initial=0)), group_p, wide_m)
            n_wide = int(np.sum(-(-q_lens // wide_q)))
            if wide_q > block_q and n_wide * num_kv_heads >= sms:
                work_class, block_q = "tiles_wide", wide_q
                reqs_a, starts_a, need, first = _query_tiles(q_lens, seq_lens, block_q, causal)
    if work_class.startswith("split") and _pads(block_q * group_p, block_m, pad_min_rows, launch):
        # One tile per request before and after (block_q >= its chunk), so the split decision
        # above holds; the padded rows are masked (no loads, no stores).
        work_class, block_q = "split", block_m // group_p
        reqs_a, starts_a, need, first = _query_tiles(q_lens, seq_lens, block_q, causal)
        pps = programs_per_sm if programs_per_sm is not None else _split_pps(block_m)
    cfg = {**PREFILL_LAUNCH_CONFIGS[work_class], **(launch or {})}
    if tokens_per_split is None and split:
        if programs_per_sm is None:
            pps = int(cfg.get("split_programs_per_sm") or pps)
        target = max(1, pps * sms)
    if block_n is not None:
        cfg["block_n"] = block_n
    bn = int(cfg["block_n"])
    tps = 0
    if tokens_per_split is not None:
        tps = -(-tokens_per_split // bn) * bn
    elif split:
        tps = _split_length(need, first, num_kv_heads, target, bn, min_split_tokens)

    n_splits = _split_counts(first, tps)
    work_rows, comb_rows = [], []
    slot = 0
    for b, qs, nd, n_split in zip(reqs_a, starts_a, need, n_splits.tolist(), strict=True):
        # Splits cut only [0, first): the last one starts at or before key first - 1, which
        # every row of the tile sees, so no split leaves a row with nothing to attend to.
        if n_split == 1:
            work_rows.append((b, qs, 0, nd, -1))
            continue
        comb_rows.append((b, qs, slot, n_split))
        for s in range(n_split):
            hi = nd if s == n_split - 1 else (s + 1) * tps
            work_rows.append((b, qs, s * tps, hi, slot + s))
        slot += n_split
    work = np.asarray(work_rows, dtype=np.int64).reshape(-1, _WORK_COLS)
    # Longest first: the GPU schedules programs in launch order, so long items don't trail.
    order = np.argsort(-(work[:, 3] - work[:, 2]), kind="stable")
    work = work[order]
    comb = np.asarray(comb_rows, dtype=np.int64).reshape(-1, _COMB_COLS)
    return PrefillPlan(
        work=torch.as_tensor(work.astype(np.int32), device=device),
        combine=torch.as_tensor(comb.astype(np.int32), device=device),
        n_slots=slot,
        block_q=block_q,
        group_p=group_p,
        tokens_per_split=tps,
        causal=causal,
        total_new=int(q_lens.sum()),
        max_seq_len=int(seq_lens.max(initial=0)),
        total_keys=int(seq_lens.sum()),
        work_class=work_class,
        block_n=bn,
        num_warps=int(cfg["num_warps"]),
        num_stages=int(cfg["num_stages"]),
        warp_specialize=bool(cfg["warp_specialize"]),
        lazy_rescale=bool(cfg["lazy_rescale"]),
        gluon=int(cfg.get("gluon", 0)),
        max_splits=int(n_splits.max(initial=1)),
        max_new=int(q_lens.max(initial=0)),
    )


def combine_shape(plan: PrefillPlan) -> tuple[int, int]:
    """(rows per program, splits per load) of the plan's split combine (COMBINE_BY_SPLITS)."""
    fits = [k for k in COMBINE_BY_SPLITS if k <= plan.max_splits]
    return COMBINE_BY_SPLITS[max(fits)] if fits else (COMBINE_ROWS, COMBINE_SPLITS)


class PrefillLaunch(PreparedAttention):
    """A prepared `paged_prefill_attention` (see `prepare_prefill`)."""

    __slots__ = ("plan",)

    def __init__(self, *args: Any, plan: PrefillPlan | None = None) -> None:
        super().__init__(*args)
        self.plan = plan


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    **kwargs: Any,
) -> torch.Tensor:
    """Chunked-prefill attention of each request's new tokens over its paged context + chunk:
    `prepare_prefill(...)` (the same arguments) launched once. See `prepare_prefill`."""
    return prepare_prefill(
        q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, **kwargs
    ).launch(k_cache, v_cache)


def prepare_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    *,
    sm_scale: float | None = None,
    causal: bool = True,
    out: torch.Tensor | None = None,
    lse_out: torch.Tensor | None = None,
    plan: PrefillPlan | None = None,
    check_bounds: bool = True,
    block_m: int = DEFAULT_PREFILL_CONFIG["block_m"],
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    warp_specialize: bool | None = None,
    lazy_rescale: bool | None = None,
    gluon: int | None = None,
    programs_per_sm: int | None = DEFAULT_PREFILL_CONFIG["programs_per_sm"],
    min_split_tokens: int = DEFAULT_PREFILL_CONFIG["min_split_tokens"],
    tokens_per_split: int | None = None,
    pad_min_rows: int = DEFAULT_PREFILL_CONFIG["pad_min_rows"],
    combine_rows: int | None = None,
    combine_splits: int | None = None,
    pdl_combine: bool = PDL_COMBINE,
) -> PrefillLaunch:
    """Chunked-prefill attention of each request's new tokens over its paged context + chunk,
    prepared once for every layer of a step.

    Shapes are in the module docstring. Raises ValueError on input the kernel cannot handle.
    Without `plan`, the work list is built from host copies of `cu_seqlens_q` and `seq_lens` (a
    device sync); a serving engine builds it once per step with `plan_prefill` and passes it
    (with check_bounds=False, which skips the validation scans that also sync). The launch
    config (block_n, num_warps, num_stages, warp_specialize, lazy_rescale, gluon) is the plan's unless
    given here. The result's `launch(k_cache, v_cache, q=None, out=None)` runs the kernels
    (kernels.paged_decode.PreparedAttention). `combine_rows` / `combine_splits` (powers of two):
    the split combine's rows per program and splits merged per step (None: `combine_shape` of
    the plan). `pdl_combine`: see kernels.paged_decode.PDL_COMBINE.
    """
    check_q_and_cache(q, k_cache, v_cache, "[total_new, num_q_heads, head_dim]")
    total_new, num_q_heads, head_dim = q.shape
    num_pages, num_kv_heads, page_size, _ = k_cache.shape
    _check(seq_lens.dim() == 1, f"seq_lens must be [batch], got {tuple(seq_lens.shape)}")
    batch = seq_lens.shape[0]
    _check(
        cu_seqlens_q.dim() == 1 and cu_seqlens_q.shape[0] == batch + 1,
        f"cu_seqlens_q must be [batch + 1 = {batch + 1}], got {tuple(cu_seqlens_q.shape)}",
    )
    _check(
        block_tables.dim() == 2 and block_tables.shape[0] == batch,
        f"block_tables must be [batch={batch}, max_pages], got {tuple(block_tables.shape)}",
    )
    for name, t in (("block_tables", block_tables), ("seq_lens", seq_lens)):
        _check(t.dtype == torch.int32, f"{name} must be int32, got {t.dtype}")
    _check(
        cu_seqlens_q.dtype == torch.int32, f"cu_seqlens_q must be int32, got {cu_seqlens_q.dtype}"
    )
    devices = {t.device for t in (q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q)}
    _check(len(devices) == 1, f"all inputs must be on one device, got {sorted(map(str, devices))}")
    _check(
        block_tables.stride(1) == 1 or block_tables.shape[1] <= 1,
        f"block_tables rows must be contiguous, got strides {block_tables.stride()}",
    )
    _check(seq_lens.stride(0) == 1 or batch <= 1, "seq_lens must be contiguous")
    _check(cu_seqlens_q.stride(0) == 1, "cu_seqlens_q must be contiguous")
    out = checked_outputs(q, out, lse_out)
    group = num_q_heads // num_kv_heads
    for name, n in (("combine_rows", combine_rows), ("combine_splits", combine_splits)):
        _check(
            n is None or (n >= 1 and n & (n - 1) == 0), f"{name} must be a power of two, got {n}"
        )

    if check_bounds or plan is None:
        cu = cu_seqlens_q.to("cpu", torch.int64).numpy()
        lens = seq_lens.to("cpu", torch.int64).numpy()
        q_lens = np.diff(cu)
        _check(
            cu[0] == 0 and bool(np.all(q_lens >= 0)) and cu[-1] == total_new,
            f"cu_seqlens_q must start at 0, not decrease and end at total_new={total_new}, "
            f"got {cu.tolist()[:8]}...",
        )
        _check(
            not causal or bool(np.all(lens >= q_lens)),
            "seq_lens must count the chunk's own tokens: seq_lens >= new tokens per request",
        )
    if check_bounds and batch > 0:
        check_pages_in_pool(block_tables, seq_lens.to(torch.int64), page_size, num_pages)
    given = dict(
        block_n=block_n,
        num_warps=num_warps,
        num_stages=num_stages,
        warp_specialize=warp_specialize,
        lazy_rescale=lazy_rescale,
        gluon=gluon,
    )
    given = {k: v for k, v in given.items() if v is not None}
    if plan is None:
        plan = plan_prefill(
            q_lens,
            lens,
            num_kv_heads,
            group,
            device=q.device,
            causal=causal,
            block_m=block_m,
            programs_per_sm=programs_per_sm,
            min_split_tokens=min_split_tokens,
            tokens_per_split=tokens_per_split,
            num_sms=_num_sms(q.device),
            launch=given,
            pad_min_rows=pad_min_rows,
        )
    else:
        _check(plan.causal == causal, f"plan was built with causal={plan.causal}")
        _check(plan.total_new == total_new, "plan was built for another batch")
        _check(
            plan.group_p == triton.next_power_of_2(group),
            f"plan was built for group {plan.group_p}, not {group}",
        )
    cfg = {**plan.launch_config(), **given}
    bn = int(cfg["block_n"])
    _check(bn >= 16 and bn & (bn - 1) == 0, f"block_n must be a power of two >= 16, got {bn}")
    _check(
        plan.tokens_per_split % bn == 0,
        f"block_n {bn} must divide the plan's split length {plan.tokens_per_split}",
    )
    if total_new == 0 or plan.work.shape[0] == 0:
        return PrefillLaunch(q, out, k_cache, v_cache, [], plan=plan)
    if plan.work_class == "decode":
        # One new token per request (cu_seqlens_q = 0..batch): it attends to all its L_b keys.
        from kernels.paged_decode import prepare_decode

        dec = prepare_decode(
            q,
            k_cache,
            v_cache,
            block_tables,
            seq_lens,
            sm_scale=sm_scale,
            out=out,
            lse_out=lse_out,
            max_seq_len=plan.max_seq_len,
            total_tokens=plan.total_keys,
            check_bounds=False,
            pdl_combine=pdl_combine,
        )
        return PrefillLaunch(q, out, k_cache, v_cache, dec.launches, plan=plan)

    if plan.n_slots:
        block_m_rows = plan.block_m
        part_out = torch.empty(
            (plan.n_slots, num_kv_heads, block_m_rows, head_dim),
            dtype=torch.float32,
            device=q.device,
        )
        part_lse = torch.empty(
            (plan.n_slots, num_kv_heads, block_m_rows), dtype=torch.float32, device=q.device
        )
    else:
        part_out = torch.empty((1, 1, 1, 1), dtype=torch.float32, device=q.device)
        part_lse = torch.empty((1, 1, 1), dtype=torch.float32, device=q.device)
    lse_t = lse_out if lse_out is not None else part_lse.view(-1)[:1].view(1, 1)
    scale = (1.0 / math.sqrt(head_dim)) if sm_scale is None else float(sm_scale)
    _check(scale > 0, f"sm_scale must be > 0, got {scale}")
    upcast = q.device.type == "cpu" and q.dtype == torch.bfloat16
    meta = dict(
        GROUP=group,
        GROUP_P=plan.group_p,
        BLOCK_Q=plan.block_q,
        HEAD_DIM=head_dim,
        WRITE_LSE=lse_out is not None,
    )
    kernel: Any = _paged_prefill_kernel
    grid = (plan.work.shape[0], num_kv_heads, 1)
    persistent: list[Any] = []
    consts: dict[str, Any] = dict(
        UPCAST_DOT=upcast,
        WARP_SPECIALIZE=bool(cfg["warp_specialize"]),
        LAZY_RESCALE=bool(cfg["lazy_rescale"]),
        num_stages=int(cfg["num_stages"]),
    )
    if cfg.get("gluon") and not upcast:
        from kernels import gluon_prefill

        variant = gluon_prefill.choose(
            int(cfg["gluon"]), q.device, head_dim, plan.block_m, bn, q.dtype
        )
        if variant is not None:
            kernel, consts = variant
            if kernel is gluon_prefill.PS_KERNEL:
                # Persistent loop 2: one program per SM (one fits: shared memory) takes the
                # (work item, KV head) units in turn.
                persistent = [plan.work.shape[0], num_kv_heads]
                programs = min(plan.work.shape[0] * num_kv_heads, _num_sms(q.device))
                grid = (min(programs, gluon_prefill.PS_MAX_PROGRAMS or programs), 1, 1)
    main = BoundLaunch(
        kernel,
        grid,
        [
            q,
            k_cache,
            v_cache,
            block_tables,
            seq_lens,
            cu_seqlens_q,
            plan.work,
            out,
            lse_t,
            part_out,
            part_lse,
            scale * _LOG2E,
            q.stride(0),
            q.stride(1),
            k_cache.stride(0),
            k_cache.stride(1),
            k_cache.stride(2),
            v_cache.stride(0),
            v_cache.stride(1),
            v_cache.stride(2),
            block_tables.stride(0),
            out.stride(0),
            out.stride(1),
            lse_t.stride(0),
            lse_t.stride(1),
            part_out.stride(0),
            part_out.stride(1),
            part_lse.stride(0),
            part_lse.stride(1),
            *persistent,
        ],
        dict(
            BLOCK_N=bn,
            PAGE_SIZE=page_size,
            CAUSAL=causal,
            **{"num_warps": int(cfg["num_warps"]), **consts},
            **meta,
        ),
        _SWAP_MAIN,
    )
    launches = [main]
    if plan.n_slots:
        # Rows of a tile spread over programs: a 128-row tile's 8 programs per KV head each
        # read their 16 rows of every split's partial (COMBINE_ROWS).
        rows, per_load = combine_shape(plan)
        combine_rows = rows if combine_rows is None else combine_rows
        combine_splits = per_load if combine_splits is None else combine_splits
        block_r = max(1, min(combine_rows, plan.block_m // 2))
        combine = BoundLaunch(
            _prefill_combine_kernel,
            # Programs only for rows some tile uses (a padded tile's others hold nothing).
            (plan.combine.shape[0], num_kv_heads, -(-plan.rows_used // block_r)),
            [
                cu_seqlens_q,
                plan.combine,
                out,
                lse_t,
                part_out,
                part_lse,
                out.stride(0),
                out.stride(1),
                lse_t.stride(0),
                lse_t.stride(1),
                part_out.stride(0),
                part_out.stride(1),
                part_lse.stride(0),
                part_lse.stride(1),
            ],
            dict(
                BLOCK_R=block_r,
                BLOCK_S=combine_splits,
                num_warps=4,
                **meta,
                **pdl_options(q.device, pdl_combine),
            ),
            _SWAP_COMBINE,
        )
        launches.append(combine)
    return PrefillLaunch(q, out, k_cache, v_cache, launches, plan=plan)


# Argument positions of (q, k_cache, v_cache, out) in each kernel's signature (-1: not one).
_SWAP_MAIN = (0, 1, 2, 7)
_SWAP_COMBINE = (-1, -1, -1, 2)
