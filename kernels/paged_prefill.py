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
Work items are ordered longest first so the tail of a ragged batch is short.
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

from kernels.paged_decode import (  # noqa: E402
    _check,
    _num_sms,
    check_pages_in_pool,
    check_q_and_cache,
    checked_outputs,
)

_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453
# Defaults: the H200 choice (kernels/README.md, `python -m kernels.bench --tune-prefill`).
DEFAULT_PREFILL_CONFIG: dict[str, Any] = {
    "block_m": 128,  # rows of the tl.dot M dimension (query tokens x group heads)
    "block_n": 128,
    "num_warps": 8,
    "num_stages": 3,
    "programs_per_sm": None,  # split keys only while fewer programs than this per SM run;
    # None: 1 for tiles of >= 64 rows (long programs), 2 for smaller tiles (H200 sweep)
    "min_split_tokens": 256,
}
_WORK_COLS = 5  # req, q_start, kv_start, kv_end, slot (-1: write out directly)
_COMB_COLS = 4  # req, q_start, first_slot, n_splits


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
    for tok0 in range(kv_start, free_end, BLOCK_N):
        offs_t = tok0 + offs_n
        page = tl.load(table_ptr + offs_t // PAGE_SIZE).to(tl.int64)
        slot_t = offs_t % PAGE_SIZE
        k = tl.load(
            k_head_ptr + page[:, None] * stride_kp + slot_t[:, None] * stride_kt + offs_d[None, :]
        )
        s = tl.dot(q, tl.trans(k.to(tl.float32))) if UPCAST_DOT else tl.dot(q, tl.trans(k))
        # Scale folded into one FMA with the max subtraction (qk_scale > 0 keeps the argmax).
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        v = tl.load(
            v_head_ptr + page[:, None] * stride_vp + slot_t[:, None] * stride_vt + offs_d[None, :]
        )
        p = p.to(v.dtype)
        if UPCAST_DOT:
            p, v = p.to(tl.float32), v.to(tl.float32)
        acc = tl.dot(p, v, acc)  # accumulate in the MMA itself
        m_i = m_new

    # The rest: the range edge and (causal) the diagonal, masked per row.
    for tok0 in range(free_end, kv_end, BLOCK_N):
        offs_t = tok0 + offs_n
        mask_t = offs_t < kv_end
        page = tl.load(table_ptr + offs_t // PAGE_SIZE, mask=mask_t, other=0).to(tl.int64)
        slot_t = offs_t % PAGE_SIZE
        k = tl.load(
            k_head_ptr + page[:, None] * stride_kp + slot_t[:, None] * stride_kt + offs_d[None, :],
            mask=mask_t[:, None],
            other=0.0,
        )
        s = tl.dot(q, tl.trans(k.to(tl.float32))) if UPCAST_DOT else tl.dot(q, tl.trans(k))
        visible = mask_t[None, :] & (offs_t[None, :] <= pos[:, None]) if CAUSAL else mask_t[None, :]
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        v = tl.load(
            v_head_ptr + page[:, None] * stride_vp + slot_t[:, None] * stride_vt + offs_d[None, :],
            mask=mask_t[:, None],
            other=0.0,
        )
        p = p.to(v.dtype)
        if UPCAST_DOT:
            p, v = p.to(tl.float32), v.to(tl.float32)
        acc = tl.dot(p, v, acc)  # accumulate in the MMA itself
        m_i = m_new

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
):
    BLOCK_M: tl.constexpr = BLOCK_Q * GROUP_P
    pid = tl.program_id(0)
    kv_head = tl.program_id(1)
    c = comb_ptr + pid * 4
    req = tl.load(c)
    q_start = tl.load(c + 1)
    first = tl.load(c + 2)
    n_splits = tl.load(c + 3)
    q_begin = tl.load(cu_q_ptr + req)
    n_new = tl.load(cu_q_ptr + req + 1) - q_begin

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    tok = q_start + offs_m // GROUP_P
    head = kv_head * GROUP + offs_m % GROUP_P
    row_ok = (tok < n_new) & ((offs_m % GROUP_P) < GROUP)

    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    wsum = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
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

    @property
    def block_m(self) -> int:
        return self.block_q * self.group_p


def choose_block_q(max_new: int, group_p: int, block_m: int) -> int:
    """Query tokens per tile: block_m rows' worth, but no more than the longest chunk needs
    (at least 16 rows in all, the tl.dot minimum)."""
    rows = min(block_m, max(16, triton.next_power_of_2(max(1, max_new) * group_p)))
    return max(1, rows // group_p)


def plan_prefill(
    q_lens: list[int] | np.ndarray,
    seq_lens: list[int] | np.ndarray,
    num_kv_heads: int,
    group: int,
    *,
    device: torch.device | str = "cpu",
    causal: bool = True,
    block_m: int = DEFAULT_PREFILL_CONFIG["block_m"],
    block_n: int = DEFAULT_PREFILL_CONFIG["block_n"],
    programs_per_sm: int | None = DEFAULT_PREFILL_CONFIG["programs_per_sm"],
    min_split_tokens: int = DEFAULT_PREFILL_CONFIG["min_split_tokens"],
    tokens_per_split: int | None = None,
    num_sms: int | None = None,
) -> PrefillPlan:
    """Host-side work list for `paged_prefill_attention` (see the module docstring).

    `tokens_per_split` forces the key-split length (tests use it to exercise the combine pass);
    otherwise keys are split only when the query tiles give fewer than `programs_per_sm` programs
    per SM, into pieces of at least `min_split_tokens`.
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
    block_q = choose_block_q(int(q_lens.max(initial=0)), group_p, block_m)

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
    reqs_a = np.asarray(reqs, dtype=np.int64)
    starts_a = np.asarray(starts, dtype=np.int64)
    need = np.asarray(needs, dtype=np.int64)
    first = np.asarray(firsts, dtype=np.int64)

    if tokens_per_split is None:
        sms = num_sms if num_sms is not None else (132 if str(device) == "cpu" else None)
        if sms is None:
            sms = _num_sms(torch.device(device))
        if programs_per_sm is None:
            programs_per_sm = 1 if block_q * group_p >= 64 else 2
        target = max(1, programs_per_sm * sms)
        tps = 0
        if 0 < len(reqs) * num_kv_heads < target:
            work_tokens = int(need.sum()) * num_kv_heads
            tps = max(min_split_tokens, -(-work_tokens // target))
            tps = -(-tps // block_n) * block_n
    else:
        if tokens_per_split < 1:
            raise ValueError(f"tokens_per_split must be >= 1, got {tokens_per_split}")
        tps = -(-tokens_per_split // block_n) * block_n

    work_rows, comb_rows = [], []
    slot = 0
    for b, qs, nd, fs in zip(reqs_a, starts_a, need, first, strict=True):
        # Splits cut only [0, fs): the last one starts at or before key fs - 1, which every row
        # of the tile sees, so no split leaves a row with nothing to attend to.
        n_split = 1 if tps == 0 else max(1, -(-int(fs) // tps))
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
    )


def paged_prefill_attention(
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
    block_n: int = DEFAULT_PREFILL_CONFIG["block_n"],
    num_warps: int = DEFAULT_PREFILL_CONFIG["num_warps"],
    num_stages: int = DEFAULT_PREFILL_CONFIG["num_stages"],
    programs_per_sm: int | None = DEFAULT_PREFILL_CONFIG["programs_per_sm"],
    min_split_tokens: int = DEFAULT_PREFILL_CONFIG["min_split_tokens"],
    tokens_per_split: int | None = None,
) -> torch.Tensor:
    """Chunked-prefill attention of each request's new tokens over its paged context + chunk.

    Shapes are in the module docstring. Raises ValueError on input the kernel cannot handle.
    Without `plan`, the work list is built from host copies of `cu_seqlens_q` and `seq_lens` (a
    device sync); a serving engine builds it once per step with `plan_prefill` and passes it
    (with check_bounds=False, which skips the validation scans that also sync).
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
    if plan is None:
        plan = plan_prefill(
            q_lens,
            lens,
            num_kv_heads,
            group,
            device=q.device,
            causal=causal,
            block_m=block_m,
            block_n=block_n,
            programs_per_sm=programs_per_sm,
            min_split_tokens=min_split_tokens,
            tokens_per_split=tokens_per_split,
            num_sms=_num_sms(q.device),
        )
    else:
        _check(plan.causal == causal, f"plan was built with causal={plan.causal}")
        _check(plan.total_new == total_new, "plan was built for another batch")
        _check(
            plan.group_p == triton.next_power_of_2(group),
            f"plan was built for group {plan.group_p}, not {group}",
        )
    if total_new == 0 or plan.work.shape[0] == 0:
        return out

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
    _paged_prefill_kernel[(plan.work.shape[0], num_kv_heads)](
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
        BLOCK_N=block_n,
        PAGE_SIZE=page_size,
        CAUSAL=causal,
        UPCAST_DOT=upcast,
        num_warps=num_warps,
        num_stages=num_stages,
        **meta,
    )
    if plan.n_slots:
        _prefill_combine_kernel[(plan.combine.shape[0], num_kv_heads)](
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
            num_warps=8 if plan.block_m * head_dim >= 128 * 128 else 4,
            **meta,
        )
    return out
