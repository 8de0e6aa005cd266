"""GQA-grouped paged decode attention in Triton, split along the sequence, with a reduction pass.

Layout (all tensors on one device):
    q            [batch, num_q_heads, head_dim]              bf16 or fp16
    k_cache      [num_pages, num_kv_heads, page_size, head_dim]  same dtype as q
    v_cache      [num_pages, num_kv_heads, page_size, head_dim]  same dtype as q
    block_tables [batch, max_pages_per_seq] int32: page ids of each sequence, in order
    seq_lens     [batch] int32: tokens in the KV cache per sequence (>= 1)
    out          [batch, num_q_heads, head_dim] same dtype as q

One page of one KV head is `page_size * head_dim` contiguous elements (16 x 128 x 2 B = 4 KiB at
the default), so every page read is a whole number of 256-byte segments.

Grouped variant (the article's kernel, `grouped=True`): one program owns one (sequence, KV head,
split) and computes all `num_q_heads // num_kv_heads` query heads of that group from a single
read of each K/V tile. Non-grouped variant (`grouped=False`): one program per query head, so
each KV tile is read once per query head of its group; it exists so the grouped kernel's gain can
be measured. The two differ only in the GROUPED constexpr.

Split-K: a sequence is cut into `tokens_per_split` slices handled by separate programs, so that
one long sequence (batch 1 x 32K) still fills every SM. Each program writes its partial
(normalised output, log-sum-exp); `_combine_kernel` merges the partials. With a single split the
first pass writes the output directly and the second pass is skipped.

Accumulation is float32 throughout (scores, running max, running sum, output accumulator); the
softmax uses exp2 with log2(e) folded into the scale.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

# Without a GPU the kernels run under Triton's interpreter (CPU CI). The interpreter is chosen
# when `triton.jit` decorates a function, so the variable must be set before triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402

from kernels.launch import BoundLaunch  # noqa: E402

SUPPORTED_PAGE_SIZES = (1, 8, 16, 32, 64, 128)
DEFAULT_PAGE_SIZE = 16
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
_LOG2E = 1.4426950408889634

# Split policy defaults, tuned on the H200 (kernels/README.md): aim for this many programs per SM
# so the tail of a ragged batch is short, but never cut a split below MIN_SPLIT_TOKENS tokens
# (each split costs a partial write of group x head_dim floats and a share of the combine pass).
DEFAULT_PROGRAMS_PER_SM = 16
MIN_SPLIT_TOKENS = 512
MAX_SPLITS = 256
# Cap the split length at the batch's mean length (for ragged batches: no sequence's split is
# longer than an average sequence); off: the defaults are what decode_attn in
# calibration/h200.json was measured with. H200 sweep of 2026-11-30 (kernels/README.md): 4
# programs per SM + this cap reach 1 x 128K 0.85 of copy (defaults 0.71) and 64 x 2K 0.1400 ms
# (0.1602) but cost the ragged seed mix 4.5% (0.779 vs 0.745 ms).
CAP_TO_MEAN = False
# Session 5 (kernels/README.md, H200 sweep of 2026-11-30 13:41 UTC):
# - `fused_combine`: the program that finishes a sequence's last split merges the partials, so a
#   split launch is one kernel, not two. On up to FUSED_COMBINE_MAX_SPLITS splits: 16 x 2K
#   0.0527 -> 0.0508 ms (4 splits), 64 x 2K 0.1584 -> 0.1508 (4), seed mix 0.7312 -> 0.7240 (at
#   most 12); past that one program's serial merge costs more than the launch it saves (16 x 8K,
#   16 splits: 0.1502 -> 0.1555; 1 x 32K, 64 splits: 0.0544 -> 0.0667).
# - `reverse_splits` (highest split first): slower on the seed mix (0.7312 -> 0.7420); off.
# - One sequence alone has no ragged tail to keep short, so it is split for
#   SINGLE_SEQUENCE_PROGRAMS_PER_SM programs per SM (fewer, longer splits): 1 x 128K 0.1757 ->
#   0.1442 ms; contexts up to 32K split the same either way (the 512-token floor).
# Session 7 (H200 sweep of 2026-11-30 18:51 UTC, measurements/bench_decode_sweep_s7_call1.json):
# one sequence at num_stages 5 (the K/V loads get two tiles of lead; 72 KB of shared memory a
# program: at most 3 per SM) and at most 2 programs per SM (one wave at any length), ms vs 4 stages
# and 4 per SM: 1 x 2K 0.0252 -> 0.0217, 8K 0.0301 -> 0.0238, 16K 0.0364 -> 0.0350, 32K 0.0544
# -> 0.0529, 32K + 1 0.0558 -> 0.0539, 64K 0.0845 -> 0.0827, 128K 0.1439 -> 0.1428.
REVERSE_SPLITS = False
FUSED_COMBINE = True
FUSED_COMBINE_MAX_SPLITS = 12
SINGLE_SEQUENCE_PROGRAMS_PER_SM = 2
SINGLE_SEQUENCE_NUM_STAGES = 5
# Session 9 (`wave_fit`, default 1.15): a program has a fixed cost (Q load, the first tiles'
# latency, the partial write and merge) that 16 programs per SM pay about four times over, since
# only RESIDENT_PROGRAMS_PER_SM fit at once (116 registers x 128 threads). When every sequence can
# take k splits with all batch x kv_heads x k programs resident in one wave, and that wave's
# longest program (max_seq_len / k tokens) is within `wave_fit` times a perfectly balanced share
# (total x kv_heads / resident slots), the launch is cut that way instead: near-uniform batches
# take one wave of long programs, ragged ones (a long sequence's share far over the mean) keep
# the finer splits whose short tail they need. Only ever fewer splits than the 16-per-SM rule, so
# decode_split_bound still bounds it. H200 sweep of 2026-11-30 23:23 UTC
# (measurements/bench_decode_sweep_s9_call1.json), ms, default rule -> wave_fit 1.15: 16 x 8K
# 0.1515 -> 0.1424, 16 x 32K 0.5140 -> 0.5064, 64 x 2K 0.1540 -> 0.1384, 64 x 8K 0.5141 ->
# 0.5002, 64 x 32K 1.9595 -> 1.9523 (16 x 2K, 256 x 2K / 8K: same splits); the seed mix and 8
# ragged batches within -1.2% .. +0.2%. At 1.5 a mildly ragged 64 x U(4K-8K) lost 2.2%.
RESIDENT_PROGRAMS_PER_SM = 4
WAVE_FIT = 1.15
# Session 10 (`wave_fit_used_slots`, default on): the slack test against a balanced share of the
# programs launched (batch x kv_heads x k) instead of all resident slots, i.e. only how ragged the
# batch is (longest split vs the mean one), once the wave fills at least WAVE_FIT_MIN_FILL of
# the slots. With all slots, a uniform batch whose k splits leave slots idle (12 x 8 x 5 = 480
# of 528) failed the test and fell back to the 16-per-SM rule: the speed jumped with the batch
# size between the calibration's power-of-two batches (the lead's round-8 steps timed alone:
# 1.078x the table at batches 12-98). H200 sweep of 2026-12-01 01:53 UTC
# (measurements/bench_decode_sweep_s10_call1.json, mean of two passes), ms, all slots -> used
# slots: 12 x 4,500 0.0793 -> 0.0720 (480 of 528 slots), 25 x 4,500 0.1412 -> 0.1310 (400),
# 48 x 4,500 0.2323 -> 0.2164 (384), 24 x 2K 0.0760 -> 0.0667 (384); 40 x 8K 0.3268 -> 0.3410
# (320: too few programs in flight), hence the fill floor; the 8 targets, 1 x 128K, the seed
# mix and 7 ragged batches within +-0.2%. At the calibration's power-of-two uniform batches it
# splits as the all-slots rule does.
WAVE_FIT_USED_SLOTS = True
WAVE_FIT_MIN_FILL = 2 / 3
# Session 9 (opt-in, `one_wave` = resident programs per SM, with the batch's `lengths` on the
# host): FlashInfer's decode planner's rule. While batch x kv_heads programs fit in one resident
# wave (one_wave x SMs), the split length is the shortest (>= min_split_tokens) whose programs
# still all fit; past that the default rule. Unlike wave_fit it balances ragged batches by their
# real lengths, but it needs them on the host, and it can split more than the default rule.
ONE_WAVE = 0
# Session 10 (opt-in, `tail_merge` = f): when the longest sequence's last split would hold fewer
# than f x tokens_per_split tokens, cut it into one split fewer, of equal length (no program and
# partial for a sliver: 256 x 8K cut at 8,000 tokens ran 2,048 programs of 192 tokens).
TAIL_MERGE = 0.0
# Session 10 (`deferred_row_sum`, opt-in): the score tile is split over the 4 warps along the
# keys, so every row reduction crosses warps (shared memory and CTA barriers: 9 barriers per
# tile in the sm_90 compile). Keeping each thread's share of the row sums as a [rows, keys]
# tile rescaled like the accumulator, summed once after the loop, leaves the row max as the
# only cross-warp reduction per tile (6 barriers). At GROUP 8 (the bench's shape: 118 -> 128
# registers, still 4 programs per SM) the H200 sweep of 2026-12-01 01:53 UTC had the seed mix
# 0.7249 -> 0.7201 ms, 7 ragged batches -0.2 .. -0.7%, the 8 targets -0.1%. But ptxas gives
# the unsplit kernel at GROUP 2 / 4 / 6 / 16 162 registers (127 without; triton 3.6 sm_90a
# compile), i.e. 3 programs per SM: llama-3-8b's (GROUP 4) decode at 64 sequences ran 9-33%
# slower in call 2's table (measurements/h200_s10_call2.json) and the engine's shared_prefix
# decode steps 18% slower (the lead's round 9). Off until it keeps 4 programs per SM.
DEFERRED_ROW_SUM = False
# Session 11: with deferred_row_sum the launch asks ptxas for at most this many registers
# (Triton's `maxnreg`), so GROUP 2 / 4 / 6 / 16 keep 4 programs per SM (the triton 3.6 sm_90a
# compile at GROUP 4: 162 -> 128 registers, 80 bytes of spill stores, loads of loop-invariant
# values from L1 in the loop); GROUP 8 compiles to 128 without the cap.
DEFERRED_ROW_SUM_MAX_REGISTERS = 128
# Session 11 (opt-in, `pdl_combine`): a separate combine launch (> FUSED_COMBINE_MAX_SPLITS
# splits; the prefill split combine too) is a programmatic dependent launch (Hopper: launch_pdl,
# griddepcontrol.wait before it reads the partials), so its launch overlaps the main kernel's
# tail instead of waiting for it to drain.
PDL_COMBINE = False
MERGE_FLOATS = 8192  # fp32 partials one fused-merge step holds: MERGE_G x MERGE_S x head_dim
# Tile and pipeline defaults from the H200 sweep (kernels/README.md, `kvsched bench --tune`).
DEFAULT_CONFIG = {
    "block_n": 64,
    "num_warps": 4,
    "num_stages": 4,
    "programs_per_sm": DEFAULT_PROGRAMS_PER_SM,
    "min_split_tokens": MIN_SPLIT_TOKENS,
    "cap_to_mean": CAP_TO_MEAN,
    "reverse_splits": REVERSE_SPLITS,
    "fused_combine": FUSED_COMBINE,
}


@triton.jit
def _paged_decode_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    out_ptr,
    lse_ptr,
    part_out_ptr,
    part_lse_ptr,
    qk_scale,  # softmax scale * log2(e): scores live in the log2 domain
    stride_qb,
    stride_qh,
    stride_kp,
    stride_kh,
    stride_kt,
    stride_vp,
    stride_vh,
    stride_vt,
    stride_btb,
    stride_ob,
    stride_oh,
    stride_pob,
    stride_poh,
    stride_pos,
    stride_plb,
    stride_plh,
    stride_lb,
    stride_lh,
    tokens_per_split,
    split_ptr,  # SPLITS_FROM_PTR: int32 [num_splits, tokens_per_split] on the device
    count_ptr,  # FUSED_COMBINE: int32 [batch, programs per sequence], zero between launches
    GROUP: tl.constexpr,  # query heads per KV head
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,  # tokens per inner tile
    BLOCK_G: tl.constexpr,  # query rows per program, padded to >= 16 for tl.dot
    GROUPED: tl.constexpr,
    SPLIT: tl.constexpr,  # True: write partials for _combine_kernel; False: write `out`
    UPCAST_DOT: tl.constexpr,  # interpreter only: its tl.dot multiplies bf16 bit patterns
    WRITE_LSE: tl.constexpr = False,  # also write each row's natural-log sum-exp (cascade)
    SPLITS_FROM_PTR: tl.constexpr = False,  # split length read from split_ptr (CUDA graphs)
    REVERSE_SPLITS: tl.constexpr = False,  # last split first: long sequences' pieces lead
    FUSED_COMBINE: tl.constexpr = False,  # the split that finishes last merges the partials
    MERGE_G: tl.constexpr = 8,  # FUSED_COMBINE: rows merged (>= the program's, power of two)
    MERGE_S: tl.constexpr = 8,  # FUSED_COMBINE: splits merged per step (power of two)
    DEFERRED_ROW_SUM: tl.constexpr = False,  # softmax row sums summed once, after the loop
    PDL_TRIGGER: tl.constexpr = False,  # let a dependent combine launch start now (PDL_COMBINE)
):
    if PDL_TRIGGER:
        gdc_launch_dependents()  # its programs wait (griddepcontrol.wait) for this grid's end
    pid_b = tl.program_id(0)
    pid_h = tl.program_id(1)
    pid_s = tl.program_id(2)
    if REVERSE_SPLITS:
        # The grid runs split 0 of every sequence first; only long sequences have high splits,
        # so in a ragged batch they would trail. Highest split first makes them lead instead.
        pid_s = tl.num_programs(2) - 1 - pid_s
    if SPLITS_FROM_PTR:
        # The grid's split dimension is an upper bound: programs past the step's splits start
        # at or past every sequence's end and exit below.
        tokens_per_split = tl.load(split_ptr + 1)
    if GROUPED:
        kv_head = pid_h
        q_head0 = pid_h * GROUP
        n_rows = GROUP
    else:
        kv_head = pid_h // GROUP
        q_head0 = pid_h
        n_rows = 1

    seq_len = tl.load(seq_lens_ptr + pid_b)
    start = pid_s * tokens_per_split
    # Splits past the end of a short sequence in a ragged batch do nothing; the combine pass
    # only reads the splits that cover the sequence, so they need not write anything either.
    if start < seq_len:
        end = tl.minimum(start + tokens_per_split, seq_len)

        offs_g = tl.arange(0, BLOCK_G)
        offs_d = tl.arange(0, HEAD_DIM)
        offs_n = tl.arange(0, BLOCK_N)
        mask_g = offs_g < n_rows

        # [BLOCK_G, HEAD_DIM]: the query rows this program serves (padding rows are zero).
        q = tl.load(
            q_ptr + pid_b * stride_qb + (q_head0 + offs_g)[:, None] * stride_qh + offs_d[None, :],
            mask=mask_g[:, None],
            other=0.0,
        )
        k_head_ptr = k_cache_ptr + kv_head * stride_kh
        v_head_ptr = v_cache_ptr + kv_head * stride_vh
        table_ptr = block_tables_ptr + pid_b * stride_btb

        m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
        acc = tl.zeros([BLOCK_G, HEAD_DIM], dtype=tl.float32)
        if DEFERRED_ROW_SUM:
            # Each thread keeps its own keys' share of the row sums (rescaled like acc), so the
            # loop has one cross-warp reduction per tile (the row max), not two.
            l_keys = tl.zeros([BLOCK_G, BLOCK_N], dtype=tl.float32)

        for tok0 in range(start, end, BLOCK_N):
            offs_t = tok0 + offs_n
            mask_t = offs_t < end
            # Each token finds its page through the block table; PAGE_SIZE is a power of two
            # constexpr, so // and % are shifts and masks. int64 before the stride multiply:
            # a pool of several GB overflows int32 element offsets.
            page = tl.load(table_ptr + offs_t // PAGE_SIZE, mask=mask_t, other=0).to(tl.int64)
            slot = offs_t % PAGE_SIZE
            # [BLOCK_N, HEAD_DIM] K tile, read once for every query row of the group.
            k = tl.load(
                k_head_ptr
                + page[:, None] * stride_kp
                + slot[:, None] * stride_kt
                + offs_d[None, :],
                mask=mask_t[:, None],
                other=0.0,
            )
            if UPCAST_DOT:
                s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)))
            else:
                s = tl.dot(q, tl.trans(k))
            s = s * qk_scale  # [BLOCK_G, BLOCK_N] fp32
            s = tl.where(mask_t[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            if DEFERRED_ROW_SUM:
                l_keys = l_keys * alpha[:, None] + p
            else:
                l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(
                v_head_ptr
                + page[:, None] * stride_vp
                + slot[:, None] * stride_vt
                + offs_d[None, :],
                mask=mask_t[:, None],
                other=0.0,
            )
            # P is rounded to the input dtype, as the tensor-core path requires.
            p = p.to(v.dtype)
            if UPCAST_DOT:
                acc = acc * alpha[:, None] + tl.dot(p.to(tl.float32), v.to(tl.float32))
            else:
                acc = acc * alpha[:, None] + tl.dot(p, v)
            m_i = m_new

        if DEFERRED_ROW_SUM:
            l_i = tl.sum(l_keys, axis=1)
        # Every split that runs holds >= 1 token, so l_i > 0 for all rows (padding rows too).
        acc = acc / l_i[:, None]
        rows = q_head0 + offs_g
        if SPLIT:
            tl.store(
                part_out_ptr
                + pid_b * stride_pob
                + rows[:, None] * stride_poh
                + pid_s * stride_pos
                + offs_d[None, :],
                acc,
                mask=mask_g[:, None],
            )
            tl.store(
                part_lse_ptr + pid_b * stride_plb + rows * stride_plh + pid_s,
                m_i + tl.log2(l_i),
                mask=mask_g,
            )
            if FUSED_COMBINE:
                # Count this split done; the last of the sequence's splits (for this program's
                # rows) merges them, so no second launch. The barrier orders every thread's
                # partial stores before the (release) count; the merger's (acquire) count
                # orders its reads after; it sets the counter back to 0 for the next launch.
                n_splits = tl.cdiv(seq_len, tokens_per_split)
                cnt_ptr = count_ptr + pid_b * tl.num_programs(1) + pid_h
                tl.debug_barrier()
                if tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu") == n_splits - 1:
                    _merge_splits(
                        part_out_ptr + pid_b * stride_pob,
                        part_lse_ptr + pid_b * stride_plb,
                        out_ptr + pid_b * stride_ob,
                        lse_ptr + pid_b * stride_lb,
                        q_head0,
                        n_rows,
                        n_splits,
                        stride_poh,
                        stride_pos,
                        stride_plh,
                        stride_oh,
                        stride_lh,
                        HEAD_DIM,
                        MERGE_G,
                        MERGE_S,
                        WRITE_LSE,
                    )
                    tl.store(cnt_ptr, 0)
        else:
            tl.store(
                out_ptr + pid_b * stride_ob + rows[:, None] * stride_oh + offs_d[None, :],
                acc.to(out_ptr.dtype.element_ty),
                mask=mask_g[:, None],
            )
            if WRITE_LSE:
                tl.store(
                    lse_ptr + pid_b * stride_lb + rows * stride_lh,
                    (m_i + tl.log2(l_i)) * 0.6931471805599453,
                    mask=mask_g,
                )


@triton.jit
def _merge_splits(
    po_ptr,  # this sequence's partial outputs [num_q_heads, num_splits, HEAD_DIM] (strides given)
    pl_ptr,  # its log2-sum-exps [num_q_heads, num_splits]
    o_ptr,
    l_ptr,
    head0,
    n_rows,
    n_splits,
    stride_poh,
    stride_pos,
    stride_plh,
    stride_oh,
    stride_lh,
    HEAD_DIM: tl.constexpr,
    MERGE_G: tl.constexpr,
    MERGE_S: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    """Merge n_splits partials of rows head0 .. head0 + n_rows (FUSED_COMBINE), MERGE_S splits a
    step, online. Loads bypass L1 (.cg): other programs wrote the partials during this launch."""
    offs_g = tl.arange(0, MERGE_G)
    offs_s = tl.arange(0, MERGE_S)
    offs_d = tl.arange(0, HEAD_DIM)
    mask_g = offs_g < n_rows
    rows = head0 + offs_g
    m = tl.full([MERGE_G], float("-inf"), dtype=tl.float32)
    wsum = tl.zeros([MERGE_G], dtype=tl.float32)
    acc = tl.zeros([MERGE_G, HEAD_DIM], dtype=tl.float32)
    for s0 in range(0, n_splits, MERGE_S):
        mask_s = (s0 + offs_s) < n_splits
        mask_gs = mask_g[:, None] & mask_s[None, :]
        lse = tl.load(
            pl_ptr + rows[:, None] * stride_plh + (s0 + offs_s)[None, :],
            mask=mask_gs,
            other=float("-inf"),
            cache_modifier=".cg",
        )  # [MERGE_G, MERGE_S]
        part = tl.load(
            po_ptr
            + rows[:, None, None] * stride_poh
            + (s0 + offs_s)[None, :, None] * stride_pos
            + offs_d[None, None, :],
            mask=mask_gs[:, :, None],
            other=0.0,
            cache_modifier=".cg",
        )  # [MERGE_G, MERGE_S, HEAD_DIM]
        m_new = tl.maximum(m, tl.max(lse, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # padding rows: no splits
        a = tl.exp2(m - m_safe)
        w = tl.exp2(lse - m_safe[:, None])  # [MERGE_G, MERGE_S], 0 where masked
        acc = acc * a[:, None] + tl.sum(part * w[:, :, None], axis=1)
        wsum = wsum * a + tl.sum(w, axis=1)
        m = m_new
    o = acc / wsum[:, None]
    tl.store(
        o_ptr + rows[:, None] * stride_oh + offs_d[None, :],
        o.to(o_ptr.dtype.element_ty),
        mask=mask_g[:, None],
    )
    if WRITE_LSE:
        tl.store(l_ptr + rows * stride_lh, (m + tl.log2(wsum)) * 0.6931471805599453, mask=mask_g)


@triton.jit
def _combine_kernel(
    part_out_ptr,
    part_lse_ptr,
    seq_lens_ptr,
    out_ptr,
    lse_out_ptr,
    stride_pob,
    stride_poh,
    stride_pos,
    stride_plb,
    stride_plh,
    stride_ob,
    stride_oh,
    stride_lb,
    stride_lh,
    tokens_per_split,
    split_ptr,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,  # splits merged per step; bounded so the tile stays in registers
    WRITE_LSE: tl.constexpr = False,
    SPLITS_FROM_PTR: tl.constexpr = False,
    PDL_WAIT: tl.constexpr = False,  # launched as a programmatic dependent of the main kernel
):
    if PDL_WAIT:
        gdc_wait()  # the main kernel's partials are complete and visible past this point
    pid_b = tl.program_id(0)
    pid_h = tl.program_id(1)
    if SPLITS_FROM_PTR:
        tokens_per_split = tl.load(split_ptr + 1)
    seq_len = tl.load(seq_lens_ptr + pid_b)
    n_splits = tl.cdiv(seq_len, tokens_per_split)  # splits that hold tokens of this sequence

    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    lse_ptr = part_lse_ptr + pid_b * stride_plb + pid_h * stride_plh
    po_ptr = part_out_ptr + pid_b * stride_pob + pid_h * stride_poh

    # Pass 1 over the [n_splits] log2-sum-exps: their max, so that pass 2 needs no rescaling.
    # Splits past the sequence were never written: masked to -inf.
    m_vec = tl.full([BLOCK_S], float("-inf"), dtype=tl.float32)
    for s0 in range(0, n_splits, BLOCK_S):
        mask_s = (s0 + offs_s) < n_splits
        lse = tl.load(lse_ptr + s0 + offs_s, mask=mask_s, other=float("-inf"))
        m_vec = tl.maximum(m_vec, lse)
    m = tl.max(m_vec, axis=0)

    # Pass 2: weight each split's normalised output by its share of the softmax mass.
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    w_vec = tl.zeros([BLOCK_S], dtype=tl.float32)
    for s0 in range(0, n_splits, BLOCK_S):
        mask_s = (s0 + offs_s) < n_splits
        lse = tl.load(lse_ptr + s0 + offs_s, mask=mask_s, other=float("-inf"))
        w = tl.where(mask_s, tl.exp2(lse - m), 0.0)
        # [BLOCK_S, HEAD_DIM] partial outputs of these splits.
        part = tl.load(
            po_ptr + (s0 + offs_s)[:, None] * stride_pos + offs_d[None, :],
            mask=mask_s[:, None],
            other=0.0,
        )
        acc += tl.sum(part * w[:, None], axis=0)
        w_vec += w
    w_sum = tl.sum(w_vec, axis=0)
    o = acc / w_sum
    tl.store(
        out_ptr + pid_b * stride_ob + pid_h * stride_oh + offs_d, o.to(out_ptr.dtype.element_ty)
    )
    if WRITE_LSE:
        tl.store(
            lse_out_ptr + pid_b * stride_lb + pid_h * stride_lh,
            (m + tl.log2(w_sum)) * 0.6931471805599453,
        )


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # the H200's count: the interpreter then follows the GPU's split decisions


def pdl_options(device: torch.device, pdl: bool) -> dict[str, bool]:
    """Launch options of a combine kernel launched as a programmatic dependent of the kernel
    before it (PDL_COMBINE): only on a GPU that has it (Hopper, compute capability 9, on)."""
    if not (pdl and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9):
        return {}
    return {"PDL_WAIT": True, "launch_pdl": True}


def register_cap(device: torch.device, deferred_row_sum: bool) -> dict[str, int]:
    """The main kernel's `maxnreg` launch option (DEFERRED_ROW_SUM_MAX_REGISTERS; GPU only)."""
    if not (deferred_row_sum and device.type == "cuda"):
        return {}
    return {"maxnreg": DEFERRED_ROW_SUM_MAX_REGISTERS}


def choose_split(
    total_tokens: int,
    max_seq_len: int,
    programs_per_seq: int,
    num_sms: int,
    block_n: int,
    programs_per_sm: int = DEFAULT_PROGRAMS_PER_SM,
    min_split_tokens: int = MIN_SPLIT_TOKENS,
    cap_to_mean: bool = CAP_TO_MEAN,
    batch: int = 0,
    wave_fit: float = WAVE_FIT,
    one_wave: int = ONE_WAVE,
    lengths: Sequence[int] | None = None,
    one_wave_slack: float = 0.0,
    tail_merge: float = TAIL_MERGE,
    wave_fit_used_slots: bool = WAVE_FIT_USED_SLOTS,
) -> tuple[int, int]:
    """Return (num_splits, tokens_per_split) for one launch.

    The work (tokens x programs per sequence) is shared so that about `programs_per_sm` programs
    per SM run; the longest sequence is cut into as many splits as that needs. Balancing by total
    work, not by batch size, keeps one 32K request in a batch of short ones from being the tail.
    With `cap_to_mean` (and the `batch` size) a split is also no longer than the batch's mean
    sequence (for a uniform batch that changes nothing). A batch of one sequence aims at no more
    than SINGLE_SEQUENCE_PROGRAMS_PER_SM programs per SM. `wave_fit` > 0 (and the batch size):
    see RESIDENT_PROGRAMS_PER_SM; `one_wave` > 0 with `lengths`: see ONE_WAVE (with
    `one_wave_slack` > 0 only where its longest split is within that factor of a balanced share,
    wave_fit's test on the real lengths). `tail_merge` > 0: see TAIL_MERGE.
    `wave_fit_used_slots`: see WAVE_FIT_USED_SLOTS.
    """
    if one_wave > 0 and lengths is not None and len(lengths) > 1:
        slots = one_wave * num_sms
        tokens = _one_wave_split(lengths, programs_per_seq, slots, block_n, min_split_tokens)
        balanced = total_tokens * programs_per_seq / slots
        if tokens and (one_wave_slack <= 0 or tokens <= one_wave_slack * balanced):
            return (
                (1, max_seq_len) if tokens >= max_seq_len else (-(-max_seq_len // tokens), tokens)
            )
    if batch == 1:
        programs_per_sm = min(programs_per_sm, SINGLE_SEQUENCE_PROGRAMS_PER_SM)
    target = max(1, programs_per_sm * num_sms)
    tokens = -(-total_tokens * programs_per_seq // target)
    if cap_to_mean and batch > 0:
        tokens = min(tokens, -(-total_tokens // batch))
    tokens = max(tokens, min_split_tokens, -(-max_seq_len // MAX_SPLITS))
    tokens = -(-tokens // block_n) * block_n
    if wave_fit > 0 and batch > 1:
        wave_tokens = _one_wave_tokens(
            total_tokens,
            max_seq_len,
            batch,
            programs_per_seq,
            num_sms,
            block_n,
            wave_fit,
            wave_fit_used_slots,
        )
        tokens = max(tokens, wave_tokens)
    if tokens >= max_seq_len:
        return 1, max(max_seq_len, 1)
    splits = -(-max_seq_len // tokens)
    if tail_merge > 0 and max_seq_len - (splits - 1) * tokens < tail_merge * tokens:
        return _merged_tail(max_seq_len, splits - 1, block_n)
    return splits, tokens


def _merged_tail(max_seq_len: int, splits: int, block_n: int) -> tuple[int, int]:
    """(num_splits, tokens_per_split) for the longest sequence cut into `splits` (>= 1) equal
    splits (a multiple of block_n tokens each) instead of one more with a short last one."""
    per_split = -(-max_seq_len // splits)
    tokens = -(-per_split // block_n) * block_n
    if tokens >= max_seq_len:
        return 1, max_seq_len
    return -(-max_seq_len // tokens), tokens


def _one_wave_tokens(
    total_tokens: int,
    max_seq_len: int,
    batch: int,
    programs_per_seq: int,
    num_sms: int,
    block_n: int,
    slack: float,
    used_slots: bool = False,
) -> int:
    """The split length that keeps every program in one resident wave (each sequence in at most
    k = slots // (batch x programs_per_seq) splits of max_seq_len / k tokens), if that wave's
    longest program is within `slack` times a balanced share of the work (total_tokens x
    programs_per_seq / slots; with `used_slots`, / (batch x programs_per_seq x k), the programs
    launched, which must fill WAVE_FIT_MIN_FILL of the slots); else 0 (keep the default rule's)."""
    slots = RESIDENT_PROGRAMS_PER_SM * num_sms
    k = slots // (batch * programs_per_seq)
    if k < 1:
        return 0
    per_split = -(-max_seq_len // k)
    tokens = -(-per_split // block_n) * block_n
    shares = slots
    if used_slots:
        shares = batch * programs_per_seq * k
        if shares < WAVE_FIT_MIN_FILL * slots:
            return 0
    if tokens * shares > slack * total_tokens * programs_per_seq:
        return 0
    return tokens


def _one_wave_split(
    lengths: Sequence[int], programs_per_seq: int, slots: int, block_n: int, min_tokens: int
) -> int:
    """The shortest split length (a multiple of block_n, >= min_tokens, <= MAX_SPLITS splits a
    sequence) whose programs (programs_per_seq x the sum of each sequence's splits) fit in
    `slots`; 0 when even unsplit sequences do not fit (then the default rule applies)."""
    lens = np.asarray(lengths, dtype=np.int64)
    if lens.size * programs_per_seq > slots:
        return 0
    longest = int(lens.max())

    def fits(tokens: int) -> bool:
        return int((-(-lens // tokens)).sum()) * programs_per_seq <= slots

    floor = max(min_tokens, -(-longest // MAX_SPLITS))
    lo = -(-floor // block_n)  # in tiles
    hi = max(lo, -(-longest // block_n))
    while lo < hi:  # the number of programs only falls as the split length grows
        mid = (lo + hi) // 2
        if fits(mid * block_n):
            hi = mid
        else:
            lo = mid + 1
    return lo * block_n


def decode_splits(
    batch: int,
    total_tokens: int,
    max_seq_len: int,
    num_kv_heads: int,
    device: torch.device | str,
    *,
    block_n: int = DEFAULT_CONFIG["block_n"],
    programs_per_sm: int = DEFAULT_PROGRAMS_PER_SM,
    min_split_tokens: int = MIN_SPLIT_TOKENS,
    cap_to_mean: bool = CAP_TO_MEAN,
    wave_fit: float = WAVE_FIT,
    one_wave: int = ONE_WAVE,
    lengths: Sequence[int] | None = None,
    one_wave_slack: float = 0.0,
    tail_merge: float = TAIL_MERGE,
    wave_fit_used_slots: bool = WAVE_FIT_USED_SLOTS,
) -> tuple[int, int]:
    """(num_splits, tokens_per_split) the grouped decode launcher picks for this batch: what a
    caller of the device-split mode writes into its `split_tensor`. The one-wave rule (opt-in,
    with the host's `lengths`) never splits more than the 16-per-SM rule, so decode_split_bound
    bounds it too."""
    return choose_split(
        total_tokens,
        max_seq_len,
        num_kv_heads,
        _num_sms(torch.device(device)),
        block_n,
        programs_per_sm,
        min_split_tokens,
        cap_to_mean,
        batch,
        wave_fit,
        one_wave,
        lengths,
        one_wave_slack,
        tail_merge,
        wave_fit_used_slots,
    )


def decode_split_bound(
    batch: int,
    max_len: int,
    num_kv_heads: int,
    device: torch.device | str,
    *,
    block_n: int = DEFAULT_CONFIG["block_n"],
    programs_per_sm: int = DEFAULT_PROGRAMS_PER_SM,
    min_split_tokens: int = MIN_SPLIT_TOKENS,
    cap_to_mean: bool = CAP_TO_MEAN,
) -> int:
    """The most splits `decode_splits` can return for `batch` sequences of at most `max_len`
    tokens each (>= 1): the grid bound of a graph captured once per batch size. For a longest
    sequence of L tokens the fewest total tokens (the others 1 each) give the most splits, so
    the bound is the max over L of choose_split(L + batch - 1, L) (vectorised, same integers).
    For batch 1 it is computed as for a larger batch (without the single-sequence rule, which
    only splits less), so decode_split_bound(1, ...) bounds every batch size."""
    if batch < 1 or max_len < 1:
        return 1
    lens = np.arange(1, max_len + 1, dtype=np.int64)
    total = lens + (batch - 1)
    target = max(1, programs_per_sm * _num_sms(torch.device(device)))
    tokens = -(-total * num_kv_heads // target)
    if cap_to_mean:
        tokens = np.minimum(tokens, -(-total // batch))
    tokens = np.maximum(np.maximum(tokens, min_split_tokens), -(-lens // MAX_SPLITS))
    tokens = -(-tokens // block_n) * block_n
    splits = np.where(tokens >= lens, 1, -(-lens // tokens))
    return int(splits.max())


def check_q_and_cache(q: torch.Tensor, k_cache, v_cache, q_layout: str) -> None:
    """What every paged attention launcher checks of q and the K/V pool (ValueError if not)."""
    _check(q.dim() == 3, f"q must be {q_layout}, got shape {tuple(q.shape)}")
    _check(
        k_cache.dim() == 4 and v_cache.dim() == 4,
        "k_cache and v_cache must be [num_pages, num_kv_heads, page_size, head_dim], got "
        f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}",
    )
    _check(
        k_cache.shape == v_cache.shape,
        f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ in shape",
    )
    _, num_q_heads, head_dim = q.shape
    _, num_kv_heads, page_size, kv_head_dim = k_cache.shape
    _check(q.dtype in SUPPORTED_DTYPES, f"q dtype {q.dtype} not supported: bf16 or fp16 only")
    _check(
        k_cache.dtype == q.dtype and v_cache.dtype == q.dtype,
        f"dtypes differ: q {q.dtype}, k_cache {k_cache.dtype}, v_cache {v_cache.dtype}",
    )
    _check(kv_head_dim == head_dim, f"head_dim differs: q {head_dim}, cache {kv_head_dim}")
    _check(head_dim in (16, 32, 64, 128, 256), f"head_dim {head_dim} not in 16/32/64/128/256")
    _check(
        num_kv_heads >= 1 and num_q_heads % num_kv_heads == 0,
        f"num_q_heads {num_q_heads} is not a multiple of num_kv_heads {num_kv_heads}",
    )
    _check(
        page_size in SUPPORTED_PAGE_SIZES,
        f"page_size {page_size} not supported: one of {SUPPORTED_PAGE_SIZES}",
    )
    # Unit stride along head_dim (so loads vectorise); every other stride is passed in.
    _check(q.stride(2) == 1, f"q must have unit stride along head_dim, got strides {q.stride()}")
    _check(
        k_cache.stride(3) == 1 and v_cache.stride(3) == 1,
        f"k_cache/v_cache need unit stride along head_dim, got {k_cache.stride()} and "
        f"{v_cache.stride()}",
    )


def checked_outputs(
    q: torch.Tensor, out: torch.Tensor | None, lse_out: torch.Tensor | None
) -> torch.Tensor:
    """`out` (allocated like q when None) after checking it and `lse_out` against q's rows."""
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    else:
        _check(
            out.shape == q.shape
            and out.dtype in (q.dtype, torch.float32)
            and out.device == q.device,
            f"out must match q: {tuple(q.shape)} {q.dtype} (or float32), got "
            f"{tuple(out.shape)} {out.dtype}",
        )
        _check(out.stride(2) == 1, f"out must have unit stride along head_dim, got {out.stride()}")
    if lse_out is not None:
        rows, num_q_heads = q.shape[0], q.shape[1]
        _check(
            lse_out.shape == (rows, num_q_heads)
            and lse_out.dtype == torch.float32
            and lse_out.device == q.device,
            f"lse_out must be float32 [{rows}, {num_q_heads}], got {tuple(lse_out.shape)} "
            f"{lse_out.dtype}",
        )
    return out


def check_pages_in_pool(
    block_tables: torch.Tensor, lens: torch.Tensor, page_size: int, num_pages: int
) -> None:
    """Every page a sequence of `lens` (int64 [batch]) tokens uses is a page of the pool."""
    max_pages = block_tables.shape[1]
    _check(
        bool((lens <= max_pages * page_size).all()),
        f"a sequence is longer than its block table: max_pages {max_pages} x page_size "
        f"{page_size} < max(seq_lens) {int(lens.max())}",
    )
    used = (
        torch.arange(max_pages, device=lens.device)[None, :]
        < ((lens + page_size - 1) // page_size)[:, None]
    )
    ids = block_tables[used]
    _check(
        ids.numel() == 0 or bool(((ids >= 0) & (ids < num_pages)).all()),
        f"block_tables point outside the pool of {num_pages} pages "
        f"(used ids span {int(ids.min())}..{int(ids.max())})",
    )


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _check_like(t: torch.Tensor, ref: torch.Tensor, name: str) -> None:
    """A per-layer tensor of a prepared launch: the prepared one's shape, strides, dtype, device."""
    if (
        t.shape != ref.shape
        or t.stride() != ref.stride()
        or t.dtype != ref.dtype
        or t.device != ref.device
    ):
        raise ValueError(
            f"{name} differs from the prepared one: {tuple(t.shape)} {t.stride()} {t.dtype} "
            f"{t.device}, prepared {tuple(ref.shape)} {ref.stride()} {ref.dtype} {ref.device}"
        )


class PreparedAttention:
    """An attention launch prepared once (validation, split choice, workspaces, constant
    arguments) and issued per layer by `launch(k_cache, v_cache, q=None, out=None)`, or by
    calling it. The K/V pool views of every layer have the prepared shape and strides; q and out
    default to the prepared ones (a graphed step's static buffers), others must match them.
    It owns its split workspaces: keep it alive as long as a CUDA graph that captured it."""

    __slots__ = ("q", "out", "k_cache", "v_cache", "launches")

    def __init__(
        self,
        q: torch.Tensor,
        out: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        launches: list[BoundLaunch],
    ) -> None:
        self.q = q
        self.out = out
        self.k_cache = k_cache
        self.v_cache = v_cache
        self.launches = launches

    def launch(
        self,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        q: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if q is None:
            q = self.q
        elif q is not self.q:
            _check_like(q, self.q, "q")
        if out is None:
            out = self.out
        elif out is not self.out:
            _check_like(out, self.out, "out")
        if k_cache is not self.k_cache:
            _check_like(k_cache, self.k_cache, "k_cache")
        if v_cache is not self.v_cache:
            _check_like(v_cache, self.v_cache, "v_cache")
        for launch in self.launches:
            launch(q, k_cache, v_cache, out)
        return out

    __call__ = launch

    @property
    def fast_launches(self) -> int:
        """Kernel launches that took the direct path (kernels.launch)."""
        return sum(launch.fast_launches for launch in self.launches)


class DecodeLaunch(PreparedAttention):
    """A prepared `paged_decode_attention` (see `prepare_decode`)."""

    __slots__ = ("num_splits", "tokens_per_split")

    def __init__(self, *args: Any, num_splits: int = 1, tokens_per_split: int = 0) -> None:
        super().__init__(*args)
        self.num_splits = num_splits
        self.tokens_per_split = tokens_per_split


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    **kwargs: Any,
) -> torch.Tensor:
    """Decode attention of one new token per sequence against its paged KV cache:
    `prepare_decode(...)` (the same arguments) launched once. See `prepare_decode`."""
    return prepare_decode(q, k_cache, v_cache, block_tables, seq_lens, **kwargs).launch(
        k_cache, v_cache
    )


def prepare_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    grouped: bool = True,
    out: torch.Tensor | None = None,
    lse_out: torch.Tensor | None = None,
    num_splits: int | None = None,
    max_seq_len: int | None = None,
    total_tokens: int | None = None,
    check_bounds: bool = True,
    block_n: int = DEFAULT_CONFIG["block_n"],
    num_warps: int = DEFAULT_CONFIG["num_warps"],
    num_stages: int | None = None,
    programs_per_sm: int = DEFAULT_PROGRAMS_PER_SM,
    min_split_tokens: int = MIN_SPLIT_TOKENS,
    cap_to_mean: bool = CAP_TO_MEAN,
    split_tensor: torch.Tensor | None = None,
    max_splits: int | None = None,
    reverse_splits: bool = REVERSE_SPLITS,
    fused_combine: bool = FUSED_COMBINE,
    wave_fit: float = WAVE_FIT,
    one_wave: int = ONE_WAVE,
    lengths: Sequence[int] | None = None,
    one_wave_slack: float = 0.0,
    deferred_row_sum: bool = DEFERRED_ROW_SUM,
    tail_merge: float = TAIL_MERGE,
    wave_fit_used_slots: bool = WAVE_FIT_USED_SLOTS,
    pdl_combine: bool = PDL_COMBINE,
) -> DecodeLaunch:
    """Decode attention of one new token per sequence, prepared once for every layer of a step.

    Shapes are in the module docstring. Raises ValueError on any input the kernel cannot handle
    (wrong ranks, mismatched heads, dtypes, devices, strides, page size, or, with check_bounds,
    a sequence longer than its block table or a used page id outside the pool).

    `max_seq_len` and `total_tokens` are host-side facts a serving engine already knows; passing
    them avoids a device sync. `check_bounds=False` skips the page-table scan (also a sync) for
    callers, such as the bench, that validated the same tables once before timing.
    `num_splits` forces the split count (tests use it to exercise both passes). `num_stages`
    None: SINGLE_SEQUENCE_NUM_STAGES for a batch of one sequence, else DEFAULT_CONFIG's.
    `out` may be float32; `lse_out` (float32 [batch, num_q_heads]), when given, receives each
    query head's natural-log sum-exp of its scaled scores (kernels.cascade_decode merges by it).
    The result's `launch(k_cache, v_cache, q=None, out=None)` runs the kernels (PreparedAttention).

    Splits from device memory (CUDA graphs captured once per batch size): with `split_tensor`
    (int32 [2] on q's device: num_splits, tokens_per_split, as `decode_splits` returns them; the
    caller writes it before each launch or replay) and `max_splits` (the grid's split dimension,
    at least any num_splits written, e.g. `decode_split_bound`), the kernels read the split length
    from the tensor; programs past the written split count exit at once. The outputs are those of
    the host-split path with the same (num_splits, tokens_per_split).

    `reverse_splits` launches every sequence's last split first; `fused_combine` merges the
    partials in the main launch (the program finishing a sequence's last split does it; an int32
    counter per program row, owned by the result, is back at 0 after every launch) when there are
    at most FUSED_COMBINE_MAX_SPLITS splits. Reversing leaves the outputs' bits unchanged; the
    fused merge rounds differently from the combine kernel (an online merge, 8 splits a step).
    `wave_fit` > 0: one wave of longer splits for near-uniform batches (RESIDENT_PROGRAMS_PER_SM).
    `one_wave` > 0 and `lengths` (the host's copy of seq_lens): FlashInfer's one-wave rule (ONE_WAVE).
    `deferred_row_sum`: see DEFERRED_ROW_SUM (same outputs up to fp32 summation order).
    `tail_merge`: see TAIL_MERGE. `wave_fit_used_slots`: see WAVE_FIT_USED_SLOTS.
    `pdl_combine`: see PDL_COMBINE (Hopper and later; elsewhere a plain launch).
    """
    check_q_and_cache(q, k_cache, v_cache, "[batch, num_q_heads, head_dim]")
    batch, num_q_heads, head_dim = q.shape
    num_pages, num_kv_heads, page_size, _ = k_cache.shape
    _check(
        block_tables.dim() == 2 and block_tables.shape[0] == batch,
        f"block_tables must be [batch={batch}, max_pages], got {tuple(block_tables.shape)}",
    )
    _check(
        seq_lens.dim() == 1 and seq_lens.shape[0] == batch,
        f"seq_lens must be [batch={batch}], got {tuple(seq_lens.shape)}",
    )
    _check(
        block_tables.dtype == torch.int32, f"block_tables must be int32, got {block_tables.dtype}"
    )
    _check(seq_lens.dtype == torch.int32, f"seq_lens must be int32, got {seq_lens.dtype}")
    devices = {t.device for t in (q, k_cache, v_cache, block_tables, seq_lens)}
    _check(len(devices) == 1, f"all inputs must be on one device, got {sorted(map(str, devices))}")
    # The kernel hard-codes unit stride within a block table row (head_dim: check_q_and_cache);
    # every other stride is passed in, so views that slice pages or heads still work.
    _check(
        block_tables.stride(1) == 1 or block_tables.shape[1] <= 1,
        f"block_tables rows must be contiguous, got strides {block_tables.stride()}",
    )
    _check(seq_lens.stride(0) == 1 or batch <= 1, "seq_lens must be contiguous")
    out = checked_outputs(q, out, lse_out)
    if batch == 0:
        return DecodeLaunch(q, out, k_cache, v_cache, [])

    if check_bounds:
        lens = seq_lens.to(torch.int64)
        _check(bool((lens >= 1).all()), "seq_lens must be >= 1 (decode attends to >= 1 token)")
        check_pages_in_pool(block_tables, lens, page_size, num_pages)
    from_ptr = split_tensor is not None
    if from_ptr:
        assert split_tensor is not None
        _check(
            split_tensor.dtype == torch.int32
            and split_tensor.shape == (2,)
            and split_tensor.device == q.device,
            f"split_tensor must be int32 [2] on {q.device}, got {tuple(split_tensor.shape)} "
            f"{split_tensor.dtype} on {split_tensor.device}",
        )
        _check(
            max_splits is not None and max_splits >= 1 and num_splits is None,
            "split_tensor needs max_splits >= 1 (and no num_splits)",
        )
    elif max_seq_len is None or (num_splits is None and total_tokens is None):
        lens_host = seq_lens.to("cpu", torch.int64)
        max_seq_len = int(lens_host.max()) if max_seq_len is None else max_seq_len
        total_tokens = int(lens_host.sum()) if total_tokens is None else total_tokens

    group = num_q_heads // num_kv_heads
    programs_per_seq = num_kv_heads if grouped else num_q_heads
    if num_stages is None:
        # One sequence: at most SINGLE_SEQUENCE_PROGRAMS_PER_SM programs per SM, which the
        # deeper pipeline's shared memory still fits in one wave.
        num_stages = SINGLE_SEQUENCE_NUM_STAGES if batch == 1 else DEFAULT_CONFIG["num_stages"]
    if from_ptr:
        assert max_splits is not None
        num_splits, tokens_per_split = max_splits, 0  # the split length is read on the device
    elif num_splits is None:
        assert total_tokens is not None and max_seq_len is not None  # counted above
        num_splits, tokens_per_split = choose_split(
            total_tokens,
            max_seq_len,
            programs_per_seq,
            _num_sms(q.device),
            block_n,
            programs_per_sm,
            min_split_tokens,
            cap_to_mean,
            batch,
            wave_fit,
            one_wave,
            lengths,
            one_wave_slack,
            tail_merge,
            wave_fit_used_slots,
        )
    else:
        _check(num_splits >= 1, f"num_splits must be >= 1, got {num_splits}")
        assert max_seq_len is not None
        tokens_per_split = -(-max_seq_len // num_splits)
        num_splits = -(-max_seq_len // tokens_per_split)
    block_g = max(16, triton.next_power_of_2(group if grouped else 1))
    split = num_splits > 1
    if split:
        part_out = torch.empty(
            (batch, num_q_heads, num_splits, head_dim), dtype=torch.float32, device=q.device
        )
        part_lse = torch.empty(
            (batch, num_q_heads, num_splits), dtype=torch.float32, device=q.device
        )
    else:
        part_out = torch.empty((1, 1, 1, 1), dtype=torch.float32, device=q.device)
        part_lse = torch.empty((1, 1, 1), dtype=torch.float32, device=q.device)
    scale = (1.0 / math.sqrt(head_dim)) if sm_scale is None else float(sm_scale)
    write_lse = lse_out is not None
    lse_t = lse_out if lse_out is not None else part_lse.view(-1)[:1].view(1, 1)
    split_t = split_tensor if split_tensor is not None else seq_lens  # (unread without from_ptr)
    fused = split and fused_combine and num_splits <= FUSED_COMBINE_MAX_SPLITS
    if fused:
        counts = torch.zeros((batch, programs_per_seq), dtype=torch.int32, device=q.device)
    else:
        counts = seq_lens  # (unread without FUSED_COMBINE)
    merge_g = triton.next_power_of_2(group if grouped else 1)

    main = BoundLaunch(
        _paged_decode_kernel,
        (batch, programs_per_seq, num_splits),
        [
            q,
            k_cache,
            v_cache,
            block_tables,
            seq_lens,
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
            part_out.stride(0),
            part_out.stride(1),
            part_out.stride(2),
            part_lse.stride(0),
            part_lse.stride(1),
            lse_t.stride(0),
            lse_t.stride(1),
            tokens_per_split,
            split_t,
            counts,
        ],
        dict(
            GROUP=group,
            HEAD_DIM=head_dim,
            PAGE_SIZE=page_size,
            BLOCK_N=block_n,
            BLOCK_G=block_g,
            GROUPED=grouped,
            SPLIT=split,
            # Triton's interpreter (CPU) mis-computes tl.dot on bf16; bf16 -> fp32 is exact, so
            # the upcast keeps the same arithmetic as the GPU's bf16 x bf16 -> fp32 dot.
            UPCAST_DOT=(q.device.type == "cpu" and q.dtype == torch.bfloat16),
            WRITE_LSE=write_lse,
            SPLITS_FROM_PTR=from_ptr,
            REVERSE_SPLITS=reverse_splits,
            FUSED_COMBINE=fused,
            MERGE_G=merge_g,
            DEFERRED_ROW_SUM=deferred_row_sum,
            PDL_TRIGGER=bool(pdl_options(q.device, pdl_combine)) and split and not fused,
            # Splits per merge step: not a function of num_splits, so a device-split graph
            # merges as the host-split path does.
            MERGE_S=max(
                1,
                min(
                    triton.next_power_of_2(FUSED_COMBINE_MAX_SPLITS),
                    MERGE_FLOATS // (merge_g * head_dim),
                ),
            ),
            num_warps=num_warps,
            num_stages=num_stages,
            **register_cap(q.device, deferred_row_sum),
        ),
        _SWAP_MAIN,
    )
    launches = [main]
    if split and not fused:
        combine = BoundLaunch(
            _combine_kernel,
            (batch, num_q_heads, 1),
            [
                part_out,
                part_lse,
                seq_lens,
                out,
                lse_t,
                part_out.stride(0),
                part_out.stride(1),
                part_out.stride(2),
                part_lse.stride(0),
                part_lse.stride(1),
                out.stride(0),
                out.stride(1),
                lse_t.stride(0),
                lse_t.stride(1),
                tokens_per_split,
                split_t,
            ],
            dict(
                HEAD_DIM=head_dim,
                BLOCK_S=min(16, triton.next_power_of_2(num_splits)),
                WRITE_LSE=write_lse,
                SPLITS_FROM_PTR=from_ptr,
                num_warps=4,
                **pdl_options(q.device, pdl_combine),
            ),
            _SWAP_COMBINE,
        )
        launches.append(combine)
    return DecodeLaunch(
        q,
        out,
        k_cache,
        v_cache,
        launches,
        num_splits=num_splits,
        tokens_per_split=tokens_per_split,
    )


# Argument positions of (q, k_cache, v_cache, out) in each kernel's signature (-1: not one).
_SWAP_MAIN = (0, 1, 2, 5)
_SWAP_COMBINE = (-1, -1, -1, 3)
