"""The paged prefill kernel's tile loop in Gluon (Triton's explicit-layout dialect), Hopper only.

Why (kernels/README.md, session 6): stock Triton 3.6 keeps the softmax of a key tile serial with
its Q @ K^T product (a wgmma stays in flight only when its result is a loop-carried accumulator),
~60% of the matmul rate. Gluon states the wgmmas, copies and barriers explicitly. Both loops
issue tile t's Q @ K^T and tile t-1's P @ V as asynchronous wgmmas, wait for the first, run tile
t's softmax on the CUDA cores while P @ V(t-1) runs on the tensor cores, then wait for it and
rescale the output (FlashAttention-3's intra-warpgroup pipelining).

Loop 1 (`_gluon_prefill_kernel`, launch key gluon=1): one 8-warp partition over the 128-row
tile. K and V pages are gathered with cp.async into two buffers each, one tile of lead: group
G_t = {K(t+1), V(t)} is issued in iteration t after the CTA barrier that retires iteration t-1's
readers of those buffers, and waited for at the top of iteration t+1. Measured slower than the
Triton loop (session 7): the Triton loop already keeps P @ V in flight, and the CTA barriers
keep both warpgroups in step.

Loop 2 (`_ws_prefill_kernel`, gluon=2, the default of the "tiles" and "split" classes):
warp-specialised. Two consumer partitions of 4 warps own rows 0-63 and 64-127 (each its Q, m, l,
acc); a 4-warp copy partition gathers K and V pages (16-row cp.async chunks; the next tile's page
ids loaded under the current tile's copies) into NS stages. Stages are handed over by mbarriers
only (`ready`: the copy partition's copies landed and were fenced for the async proxy; `empty`:
both consumers' P @ V of that stage retired), so the consumers drift apart and one's softmax
can run under the other's products. 15% faster than the Triton loop on the H200 (session 7).

Session 8 (kernels/README.md; measured on the H200, none faster than loop 2, all off by
default): loop 3 (`_ps_prefill_kernel`, gluon=3) is loop 2 made persistent (one program per SM
takes (work item, KV head) units; the copy partition copies the next unit's Q and first K/V
tiles while the consumers finish the current one): 2-3% faster on 2K chunks, 2-7% slower from
4K on. Loop 2's stage count and ready lag (WS_MAX_STAGES, WS_READY_LAG: more tiles' copies in
flight) were 5-8% slower on every shape, and its consumers taking turns (WS_PINGPONG) gained
nothing.

Same arguments and work list as `kernels.paged_prefill._paged_prefill_kernel` (a program = one
work item x one KV head; partials when the item is a split), for tiles of 128 rows (BLOCK_Q x
GROUP_P), head_dim 128 (written for 64-256, a power of two, but run on the GPU at 128 only;
loop 2 needs 3 stages next to Q), bf16 / fp16, on sm_90. `choose(...)` says whether and how it runs; the
launcher falls back to the Triton kernel otherwise (the CPU interpreter cannot run Gluon).
"""

from __future__ import annotations

from typing import Any

import torch

try:  # Gluon: Triton >= 3.5 (the device has 3.6); kernels/ must import without it
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        async_copy,
        fence_async_shared,
        mbarrier,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    HAVE_GLUON = True
except Exception:  # pragma: no cover - depends on the installed Triton
    HAVE_GLUON = False


# Gluon is experimental and its API changes between Triton releases (3.9's warp_specialize does
# not take these partitions): the loops run only under the releases they were tested on.
TESTED_TRITON = ("3.6",)


def available(device: torch.device | str) -> bool:
    """Gluon is importable, Triton is a tested release and `device` is a CUDA device of compute
    capability 9.x."""
    import triton

    if not HAVE_GLUON or ".".join(triton.__version__.split(".")[:2]) not in TESTED_TRITON:
        return False
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(dev)[0] == 9


# The loops are written for head_dim 64-256 but were run on the GPU at 128 only (every preset).
TESTED_HEAD_DIMS = (128,)


def supports(head_dim: int, block_m: int, block_n: int, dtype: torch.dtype) -> bool:
    """Shapes the Gluon loops run for (others: the Triton kernel)."""
    return (
        dtype in (torch.bfloat16, torch.float16)
        and block_m == 128
        and block_n in (64, 128)
        and head_dim in TESTED_HEAD_DIMS
    )


SMEM_BYTES = 232_448  # sm_90: shared memory one block may use
WS_CONSUMER_REGS = 224  # setmaxnreg of the second consumer (the first gets what is left)
WS_PRODUCER_REGS = 64
WS_PRODUCER_WARPS = 4  # setmaxnreg works per warpgroup
# Loop 2's K/V stages (at most; 6 fit next to one Q tile at 64-key tiles) and ready lag: a tile
# is marked ready once LAG later tiles' copies were issued, so LAG + 1 tiles' copies are in
# flight (<= NS - 3: a larger lag makes the consumers' stage release wait on copies).
WS_MAX_STAGES = 4
WS_READY_LAG = 1
WS_PINGPONG = 0  # 1: the consumers take turns issuing their products (_ws_consumer)
# 1: a consumer none of whose 64 rows is a query (chunks of <= 64 / GROUP_P tokens in a padded
# 128-row tile: kernels.paged_prefill's pad_min_rows) only hands the stages back (session 12).
# H200, 2026-12-01 07:31 UTC (measurements/bench_small_s12_call1.json), padded tiles, ms, 0 ->
# 1: 2 / 4 / 8 tokens over 32K 0.0542 / 0.0545 / 0.0553 -> 0.0516 / 0.0518 / 0.0528; 24 tokens
# (tiles of 16 + 8) 0.0874 -> 0.0880; tiles with both halves used unchanged.
WS_SKIP_IDLE = 1
# Persistent loop 2 (variant 3): the same knobs (5 stages fit next to two Q tiles at 64-key
# tiles), the unit order (_ps_unit) and a cap on its programs (None: one per SM; tests use it
# to give each program many units).
PS_READY_LAG = 1
PS_MAX_STAGES = 4
PS_ORDER = 0
PS_MAX_PROGRAMS: int | None = None


def ws_stages(head_dim: int, block_n: int, q_buffers: int = 1, max_stages: int = 4) -> int:
    """K/V stages of the warp-specialised loop that fit next to Q (>= 3: the copy partition
    marks a tile ready one tile late, and a stage is released after its P @ V), at most
    max_stages; the persistent loop keeps two Q tiles (q_buffers=2)."""
    stage = 2 * block_n * head_dim * 2
    q_bytes = q_buffers * 128 * head_dim * 2
    return min(max_stages, (SMEM_BYTES - q_bytes - 4 * block_n - 1024) // stage)


def choose(
    variant: int,
    device: torch.device | str,
    head_dim: int,
    block_m: int,
    block_n: int,
    dtype: torch.dtype,
) -> tuple[Any, dict[str, int]] | None:
    """(kernel, its launch constants) of Gluon variant 1, 2 or 3 for these shapes, or None when
    the Triton kernel must run (no Gluon / no sm_90 / a shape the loops are not written for).
    Variant 3 (persistent loop 2) runs loop 2 where its two Q buffers leave < 3 stages."""
    if variant not in (1, 2, 3) or not available(device):
        return None
    if not supports(head_dim, block_m, block_n, dtype):
        return None
    if variant == 1:
        return KERNEL, {"NUM_WARPS": 8, "num_warps": 8}
    ns = ws_stages(head_dim, block_n, 2, PS_MAX_STAGES) if variant == 3 else 0
    if ns < 3:
        variant, ns = 2, ws_stages(head_dim, block_n, 1, WS_MAX_STAGES)
    if ns < 3:
        return None
    consts = {
        "NUM_WARPS": 4,
        "num_warps": 4,
        "NS": ns,
        "P_WARPS": WS_PRODUCER_WARPS,
        "C_REGS": WS_CONSUMER_REGS,
        "P_REGS": WS_PRODUCER_REGS,
    }
    if variant == 2:
        lag = max(1, min(WS_READY_LAG, ns - 3))
        knobs = {"LAG": lag, "PINGPONG": int(WS_PINGPONG), "SKIP_IDLE": int(WS_SKIP_IDLE)}
        return WS_KERNEL, {**consts, **knobs}
    return PS_KERNEL, {**consts, "LAG": max(1, min(PS_READY_LAG, ns - 3)), "ORDER": PS_ORDER}


if HAVE_GLUON:

    @gluon.jit
    def _pages(
        table_ptr,
        tok0,
        kv_end,
        BLOCK_N: gl.constexpr,
        PAGE_SIZE: gl.constexpr,
        layout: gl.constexpr,
    ):
        """The page of every key row of the tile at tok0 (0 past kv_end or before 0)."""
        t = tok0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
        ok = (t < kv_end) & (t >= 0)
        return gl.load(table_ptr + t // PAGE_SIZE, mask=ok, other=0)

    @gluon.jit
    def _copy_tile(
        dst, head_ptr, page, tok0, kv_end, stride_p, stride_t,
        BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr,
        layout: gl.constexpr,
    ):  # fmt: skip
        """cp.async the tile at tok0 (pages given) into dst; rows outside [0, kv_end) zero-filled."""
        t = tok0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
        ok = (t < kv_end) & (t >= 0)
        offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
        rows = page.to(gl.int64) * stride_p + (t % PAGE_SIZE) * stride_t
        async_copy.async_copy_global_to_shared(
            dst, head_ptr + rows[:, None] + offs_d[None, :], mask=ok[:, None]
        )

    @gluon.jit
    def _gluon_prefill_kernel(
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
        GROUP: gl.constexpr,
        GROUP_P: gl.constexpr,
        BLOCK_Q: gl.constexpr,
        BLOCK_N: gl.constexpr,
        HEAD_DIM: gl.constexpr,
        PAGE_SIZE: gl.constexpr,
        CAUSAL: gl.constexpr,
        WRITE_LSE: gl.constexpr,
        NUM_WARPS: gl.constexpr,
    ):
        BLOCK_M: gl.constexpr = BLOCK_Q * GROUP_P
        dtype: gl.constexpr = q_ptr.dtype.element_ty
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, BLOCK_N, 16]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, HEAD_DIM, 16]
        )
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        VEC: gl.constexpr = 8  # 16-byte copies
        TPW_D: gl.constexpr = HEAD_DIM // VEC if HEAD_DIM // VEC < 32 else 32
        ld_layout: gl.constexpr = gl.BlockedLayout(
            size_per_thread=[1, VEC],
            threads_per_warp=[32 // TPW_D, TPW_D],
            warps_per_cta=[NUM_WARPS, 1],
            order=[1, 0],
        )
        smem_layout: gl.constexpr = gl.NVMMASharedLayout(
            swizzle_byte_width=128, element_bitwidth=16, rank=2
        )
        s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
        s_cols: gl.constexpr = gl.SliceLayout(0, s_layout)
        o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
        o_cols: gl.constexpr = gl.SliceLayout(0, o_layout)

        pid_w = gl.program_id(0)
        kv_head = gl.program_id(1)
        w = work_ptr + pid_w * 5
        req = gl.load(w)
        q_start = gl.load(w + 1)
        kv_start = gl.load(w + 2)
        kv_end = gl.load(w + 3)
        slot = gl.load(w + 4)
        q_begin = gl.load(cu_q_ptr + req)
        n_new = gl.load(cu_q_ptr + req + 1) - q_begin
        seq_len = gl.load(seq_lens_ptr + req)
        ctx = seq_len - n_new

        k_head_ptr = k_cache_ptr + kv_head * stride_kh
        v_head_ptr = v_cache_ptr + kv_head * stride_vh
        table_ptr = block_tables_ptr + req * stride_btb

        k_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_DIM], smem_layout)
        v_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_DIM], smem_layout)
        # Page ids one tile ahead of their copies (the table load's latency off the loop's
        # path): pg_v = tile t's pages (its V copy), pg_k = tile t + 1's (its K copy).
        pg_v = _pages(table_ptr, kv_start, kv_end, BLOCK_N, PAGE_SIZE, ld_layout)
        pg_k = _pages(table_ptr, kv_start + BLOCK_N, kv_end, BLOCK_N, PAGE_SIZE, ld_layout)
        # G_{-1} = {K(0)}.
        _copy_tile(
            k_smem.index(0), k_head_ptr, pg_v, kv_start, kv_end, stride_kp, stride_kt,
            BLOCK_N, HEAD_DIM, PAGE_SIZE, ld_layout,
        )  # fmt: skip
        async_copy.commit_group()

        # Q tile: rows = BLOCK_Q tokens x GROUP_P heads (row r: token r // GROUP_P).
        lm = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, ld_layout))
        ld = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld_layout))
        q_tok = q_start + lm // GROUP_P
        q_ok = (q_tok < n_new) & ((lm % GROUP_P) < GROUP)
        q_rows = (q_begin + q_tok).to(gl.int64) * stride_qt + (
            kv_head * GROUP + lm % GROUP_P
        ) * stride_qh
        q = gl.load(q_ptr + q_rows[:, None] + ld[None, :], mask=q_ok[:, None], other=0.0)
        q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], smem_layout, q)

        offs_m = gl.arange(0, BLOCK_M, layout=s_rows)
        pos = ctx + q_start + offs_m // GROUP_P  # each row sees keys <= pos
        offs_n = gl.arange(0, BLOCK_N, layout=s_cols)
        # Tiles from free_end on need the per-row mask (range edge, causal diagonal).
        free_end = gl.minimum(kv_end, ctx + q_start + 1) if CAUSAL else kv_end
        free_end = kv_start + ((free_end - kv_start) // BLOCK_N) * BLOCK_N
        n_tiles = (kv_end - kv_start + BLOCK_N - 1) // BLOCK_N

        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=s_rows)
        l_i = gl.zeros([BLOCK_M], gl.float32, layout=s_rows)
        acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)
        s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)

        # Tile 0: Q @ K(0)^T, softmax; no P @ V yet. G_0 = {K(1), V(0)}.
        async_copy.wait_group(0)
        gl.thread_barrier()
        fence_async_shared()
        s_tok = warpgroup_mma(
            q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True
        )
        _copy_tile(
            k_smem.index(1), k_head_ptr, pg_k, kv_start + BLOCK_N, kv_end, stride_kp, stride_kt,
            BLOCK_N, HEAD_DIM, PAGE_SIZE, ld_layout,
        )  # fmt: skip
        _copy_tile(
            v_smem.index(0), v_head_ptr, pg_v, kv_start, kv_end, stride_vp, stride_vt,
            BLOCK_N, HEAD_DIM, PAGE_SIZE, ld_layout,
        )  # fmt: skip
        async_copy.commit_group()
        pg_v = pg_k
        pg_k = _pages(table_ptr, kv_start + 2 * BLOCK_N, kv_end, BLOCK_N, PAGE_SIZE, ld_layout)
        s = warpgroup_mma_wait(num_outstanding=0, deps=[s_tok])
        if kv_start + BLOCK_N > free_end:
            t_ = kv_start + offs_n
            vis = t_[None, :] < kv_end
            if CAUSAL:
                vis = vis & (t_[None, :] <= pos[:, None])
            s = gl.where(vis, s, float("-inf"))
        m_i = gl.max(s, axis=1) * qk_scale
        p = gl.exp2(s * qk_scale - m_i[:, None])
        l_i = gl.sum(p, axis=1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)

        for t in range(1, n_tiles):
            tok0 = kv_start + t * BLOCK_N
            # G_{t-1} = {K(t), V(t-1)} landed (own copies; the barrier: everyone's, and every
            # reader of K(t-1) and V(t-2) retired), then G_t = {K(t+1), V(t)}.
            async_copy.wait_group(0)
            gl.thread_barrier()
            fence_async_shared()
            s_tok = warpgroup_mma(
                q_smem, k_smem.index(t % 2).permute((1, 0)), s_zero, use_acc=False, is_async=True
            )
            acc_tok = warpgroup_mma(p_op, v_smem.index((t + 1) % 2), acc, is_async=True)
            # The copies are issued while both products run (other buffers).
            _copy_tile(
                k_smem.index((t + 1) % 2), k_head_ptr, pg_k, tok0 + BLOCK_N, kv_end, stride_kp,
                stride_kt, BLOCK_N, HEAD_DIM, PAGE_SIZE, ld_layout,
            )  # fmt: skip
            _copy_tile(
                v_smem.index(t % 2), v_head_ptr, pg_v, tok0, kv_end, stride_vp, stride_vt,
                BLOCK_N, HEAD_DIM, PAGE_SIZE, ld_layout,
            )  # fmt: skip
            async_copy.commit_group()
            pg_v = pg_k
            pg_k = _pages(table_ptr, tok0 + 2 * BLOCK_N, kv_end, BLOCK_N, PAGE_SIZE, ld_layout)
            s = warpgroup_mma_wait(num_outstanding=1, deps=[s_tok])
            # The softmax of tile t runs while P @ V(t-1) is on the tensor cores.
            if tok0 + BLOCK_N > free_end:
                t_ = tok0 + offs_n
                vis = t_[None, :] < kv_end
                if CAUSAL:
                    vis = vis & (t_[None, :] <= pos[:, None])
                s = gl.where(vis, s, float("-inf"))
            m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
            alpha = gl.exp2(m_i - m_new)
            p = gl.exp2(s * qk_scale - m_new[:, None])
            l_i = l_i * alpha + gl.sum(p, axis=1)
            m_i = m_new
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc_tok])
            acc = acc * gl.convert_layout(alpha, o_rows)[:, None]

        # The last tile's P @ V: V(n_tiles - 1) came with G_{n_tiles - 1}.
        async_copy.wait_group(0)
        gl.thread_barrier()
        fence_async_shared()
        acc = warpgroup_mma(p_op, v_smem.index((n_tiles + 1) % 2), acc)

        l_o = gl.convert_layout(l_i, o_rows)
        acc = acc / l_o[:, None]
        lse2 = m_i + gl.log2(l_i)
        om = gl.arange(0, BLOCK_M, layout=o_rows)
        od = gl.arange(0, HEAD_DIM, layout=o_cols)
        o_tok = q_start + om // GROUP_P
        o_ok = (o_tok < n_new) & ((om % GROUP_P) < GROUP)
        o_head = kv_head * GROUP + om % GROUP_P
        l_tok = q_start + offs_m // GROUP_P
        l_ok = (l_tok < n_new) & ((offs_m % GROUP_P) < GROUP)
        l_head = kv_head * GROUP + offs_m % GROUP_P
        if slot < 0:
            o_off = (q_begin + o_tok).to(gl.int64) * stride_ot + o_head * stride_oh
            gl.store(
                out_ptr + o_off[:, None] + od[None, :],
                acc.to(out_ptr.dtype.element_ty),
                mask=o_ok[:, None],
            )
            if WRITE_LSE:
                l_off = (q_begin + l_tok).to(gl.int64) * stride_lt + l_head * stride_lh
                gl.store(lse_ptr + l_off, lse2 * 0.6931471805599453, mask=l_ok)
        else:
            po = part_out_ptr + slot.to(gl.int64) * stride_pos + kv_head * stride_poh
            gl.store(po + om[:, None] * HEAD_DIM + od[None, :], acc, mask=o_ok[:, None])
            pl = part_lse_ptr + slot.to(gl.int64) * stride_pls + kv_head * stride_plh
            gl.store(pl + offs_m, lse2, mask=l_ok)

    # ---- gluon = 2: warp-specialised (two consumer warpgroups of 64 rows, one copy partition) ----

    @gluon.jit
    def _ws_producer(
        k_head_ptr, v_head_ptr, table_ptr, kv_start, kv_end, n_tiles,
        stride_kp, stride_kt, stride_vp, stride_vt,
        k_smem, v_smem, pg_smem, ready, empty,
        BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr,
        NS: gl.constexpr, P_WARPS: gl.constexpr, LAG: gl.constexpr,
    ):  # fmt: skip
        """Gathers tile t's K and V (16-row chunks, cp.async) into stage t % NS once both
        consumers released it; tile t - LAG is marked ready when its copies landed (after tile
        t's were issued: LAG + 1 tiles' copies in flight; LAG <= NS - 3, else the consumers'
        release of a stage would wait on the copies of a tile they do not need yet)."""
        CH: gl.constexpr = 16
        TPW_D: gl.constexpr = HEAD_DIM // 8 if HEAD_DIM // 8 < 32 else 32
        ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [P_WARPS, 1], [1, 0])
        pl: gl.constexpr = gl.BlockedLayout([1], [32], [P_WARPS], [0])
        offs_c = gl.arange(0, CH, layout=gl.SliceLayout(1, ld))
        offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld))
        offs_p = gl.arange(0, BLOCK_N, layout=pl)
        t0 = kv_start + offs_p
        pg_smem.store(gl.load(table_ptr + t0 // PAGE_SIZE, mask=t0 < kv_end, other=0))
        for t in range(n_tiles):
            st = t % NS
            tok0 = kv_start + t * BLOCK_N
            tn = tok0 + BLOCK_N + offs_p  # the next tile's page ids: loaded under the copies
            pg_next = gl.load(table_ptr + tn // PAGE_SIZE, mask=tn < kv_end, other=0)
            mbarrier.wait(empty.index(st), ((t // NS) & 1) ^ 1)
            gl.thread_barrier()
            for c in gl.static_range(BLOCK_N // CH):
                tt = tok0 + c * CH + offs_c
                ok = tt < kv_end
                page = pg_smem.slice(c * CH, CH).load(gl.SliceLayout(1, ld)).to(gl.int64)
                krow = page * stride_kp + (tt % PAGE_SIZE) * stride_kt
                async_copy.async_copy_global_to_shared(
                    k_smem.index(st).slice(c * CH, CH),
                    k_head_ptr + krow[:, None] + offs_d[None, :],
                    mask=ok[:, None],
                )
                vrow = page * stride_vp + (tt % PAGE_SIZE) * stride_vt
                async_copy.async_copy_global_to_shared(
                    v_smem.index(st).slice(c * CH, CH),
                    v_head_ptr + vrow[:, None] + offs_d[None, :],
                    mask=ok[:, None],
                )
            async_copy.commit_group()
            gl.thread_barrier()  # every thread read this tile's page ids
            pg_smem.store(pg_next)
            if t >= LAG:  # tile t - LAG landed once <= LAG groups are in flight
                async_copy.wait_group(LAG)
                gl.thread_barrier()
                fence_async_shared()
                mbarrier.arrive(ready.index((t - LAG) % NS))
        async_copy.wait_group(0)
        gl.thread_barrier()
        fence_async_shared()
        for j in range(gl.maximum(n_tiles - LAG, 0), n_tiles):
            mbarrier.arrive(ready.index(j % NS))

    @gluon.jit
    def _ws_softmax_tile(
        s, m_i, tok0, free_end, kv_end, pos, offs_n, qk_scale, CAUSAL: gl.constexpr
    ):
        if tok0 + s.shape[1] > free_end:
            t_ = tok0 + offs_n
            vis = t_[None, :] < kv_end
            if CAUSAL:
                vis = vis & (t_[None, :] <= pos[:, None])
            s = gl.where(vis, s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
        p = gl.exp2(s * qk_scale - m_new[:, None])
        return p, m_new

    @gluon.jit
    def _ws_release_stages(ready, empty, n_tiles, NS: gl.constexpr):
        """A consumer whose 64 rows are all padding (a chunk of <= 64 / GROUP_P tokens in a
        128-row tile): hands each stage back once its copies landed, as its P @ V would have,
        so the other consumer's products have the tensor cores alone. Waiting for `ready` keeps
        its arrivals in the stage's current phase (the copy of tile t + NS waits for both)."""
        for t in range(n_tiles - 1):  # the last tile's stage is never waited for (as below)
            st = t % NS
            mbarrier.wait(ready.index(st), (t // NS) & 1)
            mbarrier.arrive(empty.index(st))

    @gluon.jit
    def _ws_consumer(
        q_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, qk_scale,
        q_begin, n_new, ctx, q_start, kv_start, kv_end, slot, kv_head, n_tiles,
        stride_qt, stride_qh, stride_ot, stride_oh, stride_lt, stride_lh,
        stride_pos, stride_poh, stride_pls, stride_plh,
        q_smem, k_smem, v_smem, ready, empty, turn,
        GROUP: gl.constexpr, GROUP_P: gl.constexpr, BLOCK_N: gl.constexpr,
        HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, WRITE_LSE: gl.constexpr,
        NS: gl.constexpr, C: gl.constexpr, PINGPONG: gl.constexpr, SKIP_IDLE: gl.constexpr,
    ):  # fmt: skip
        """Consumer C's rows (`_ws_consumer_rows`), or with SKIP_IDLE (not with PINGPONG, whose
        turns need both) only the stage hand-back when none of its rows is a query (session 12)."""
        idle = q_start + (C * 64) // GROUP_P >= n_new if SKIP_IDLE and not PINGPONG else False
        if idle:
            _ws_release_stages(ready, empty, n_tiles, NS)
        else:
            _ws_consumer_rows(
                q_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, qk_scale,
                q_begin, n_new, ctx, q_start, kv_start, kv_end, slot, kv_head, n_tiles,
                stride_qt, stride_qh, stride_ot, stride_oh, stride_lt, stride_lh,
                stride_pos, stride_poh, stride_pls, stride_plh,
                q_smem, k_smem, v_smem, ready, empty, turn,
                GROUP, GROUP_P, BLOCK_N, HEAD_DIM, CAUSAL, WRITE_LSE, NS, C, PINGPONG,
            )  # fmt: skip

    @gluon.jit
    def _ws_consumer_rows(
        q_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, qk_scale,
        q_begin, n_new, ctx, q_start, kv_start, kv_end, slot, kv_head, n_tiles,
        stride_qt, stride_qh, stride_ot, stride_oh, stride_lt, stride_lh,
        stride_pos, stride_poh, stride_pls, stride_plh,
        q_smem, k_smem, v_smem, ready, empty, turn,
        GROUP: gl.constexpr, GROUP_P: gl.constexpr, BLOCK_N: gl.constexpr,
        HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, WRITE_LSE: gl.constexpr,
        NS: gl.constexpr, C: gl.constexpr, PINGPONG: gl.constexpr,
    ):  # fmt: skip
        """Rows [64 C, 64 C + 64) of the tile: Q @ K(t)^T and P(t-1) @ V(t-1) in flight
        together, the softmax of tile t under the latter; a stage is released when its P @ V
        retired. PINGPONG: the two consumers take turns issuing a tile's products (mbarriers
        `turn`; consumer 0 first), so one's softmax runs while the other's products do
        (FlashAttention-3's inter-warpgroup schedule)."""
        ROWS: gl.constexpr = 64
        dtype: gl.constexpr = q_ptr.dtype.element_ty
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
        )
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        TPW_D: gl.constexpr = HEAD_DIM // 8 if HEAD_DIM // 8 < 32 else 32
        ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [4, 1], [1, 0])
        s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
        o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)

        lm = C * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, ld))
        ld_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld))
        q_tok = q_start + lm // GROUP_P
        q_ok = (q_tok < n_new) & ((lm % GROUP_P) < GROUP)
        q_rows = (q_begin + q_tok).to(gl.int64) * stride_qt + (
            kv_head * GROUP + lm % GROUP_P
        ) * stride_qh
        q = gl.load(q_ptr + q_rows[:, None] + ld_d[None, :], mask=q_ok[:, None], other=0.0)
        qs = q_smem.index(C)
        qs.store(q)
        gl.thread_barrier()
        fence_async_shared()

        offs_m = C * ROWS + gl.arange(0, ROWS, layout=s_rows)
        pos = ctx + q_start + offs_m // GROUP_P
        offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        free_end = gl.minimum(kv_end, ctx + q_start + 1) if CAUSAL else kv_end
        free_end = kv_start + ((free_end - kv_start) // BLOCK_N) * BLOCK_N
        s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
        acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=o_layout)
        m_i = gl.full([ROWS], float("-inf"), gl.float32, layout=s_rows)

        mbarrier.wait(ready.index(0), 0)
        if PINGPONG:
            mbarrier.wait(turn.index(C), 1 - C)
        s_tok = warpgroup_mma(
            qs, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True
        )
        if PINGPONG:
            mbarrier.arrive(turn.index(1 - C))
        s = warpgroup_mma_wait(num_outstanding=0, deps=[s_tok])
        p, m_i = _ws_softmax_tile(s, m_i, kv_start, free_end, kv_end, pos, offs_n, qk_scale, CAUSAL)
        l_i = gl.sum(p, axis=1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        for t in range(1, n_tiles):
            st = t % NS
            pst = (t - 1) % NS
            mbarrier.wait(ready.index(st), (t // NS) & 1)
            if PINGPONG:  # this consumer's t-th turn (consumer 1 waits for 0's, 0 for 1's)
                mbarrier.wait(turn.index(C), (t & 1) ^ (1 - C))
            s_tok = warpgroup_mma(
                qs, k_smem.index(st).permute((1, 0)), s_zero, use_acc=False, is_async=True
            )
            acc_tok = warpgroup_mma(p_op, v_smem.index(pst), acc, is_async=True)
            if PINGPONG:
                mbarrier.arrive(turn.index(1 - C))
            s = warpgroup_mma_wait(num_outstanding=1, deps=[s_tok])
            p, m_new = _ws_softmax_tile(
                s, m_i, kv_start + t * BLOCK_N, free_end, kv_end, pos, offs_n, qk_scale, CAUSAL
            )
            alpha = gl.exp2(m_i - m_new)
            l_i = l_i * alpha + gl.sum(p, axis=1)
            m_i = m_new
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc_tok])
            mbarrier.arrive(empty.index(pst))
            acc = acc * gl.convert_layout(alpha, o_rows)[:, None]
        acc = warpgroup_mma(p_op, v_smem.index((n_tiles - 1) % NS), acc)

        acc = acc / gl.convert_layout(l_i, o_rows)[:, None]
        lse2 = m_i + gl.log2(l_i)
        om = C * ROWS + gl.arange(0, ROWS, layout=o_rows)
        od = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        o_tok = q_start + om // GROUP_P
        o_ok = (o_tok < n_new) & ((om % GROUP_P) < GROUP)
        o_head = kv_head * GROUP + om % GROUP_P
        l_tok = q_start + offs_m // GROUP_P
        l_ok = (l_tok < n_new) & ((offs_m % GROUP_P) < GROUP)
        l_head = kv_head * GROUP + offs_m % GROUP_P
        if slot < 0:
            o_off = (q_begin + o_tok).to(gl.int64) * stride_ot + o_head * stride_oh
            gl.store(
                out_ptr + o_off[:, None] + od[None, :],
                acc.to(out_ptr.dtype.element_ty),
                mask=o_ok[:, None],
            )
            if WRITE_LSE:
                l_off = (q_begin + l_tok).to(gl.int64) * stride_lt + l_head * stride_lh
                gl.store(lse_ptr + l_off, lse2 * 0.6931471805599453, mask=l_ok)
        else:
            po = part_out_ptr + slot.to(gl.int64) * stride_pos + kv_head * stride_poh
            gl.store(po + om[:, None] * HEAD_DIM + od[None, :], acc, mask=o_ok[:, None])
            pl = part_lse_ptr + slot.to(gl.int64) * stride_pls + kv_head * stride_plh
            gl.store(pl + offs_m, lse2, mask=l_ok)

    @gluon.jit
    def _ws_prefill_kernel(
        q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, cu_q_ptr, work_ptr,
        out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, qk_scale,
        stride_qt, stride_qh, stride_kp, stride_kh, stride_kt, stride_vp, stride_vh, stride_vt,
        stride_btb, stride_ot, stride_oh, stride_lt, stride_lh,
        stride_pos, stride_poh, stride_pls, stride_plh,
        GROUP: gl.constexpr, GROUP_P: gl.constexpr, BLOCK_Q: gl.constexpr,
        BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr,
        CAUSAL: gl.constexpr, WRITE_LSE: gl.constexpr, NUM_WARPS: gl.constexpr,
        NS: gl.constexpr, P_WARPS: gl.constexpr, C_REGS: gl.constexpr, P_REGS: gl.constexpr,
        LAG: gl.constexpr, PINGPONG: gl.constexpr, SKIP_IDLE: gl.constexpr,
    ):  # fmt: skip
        gl.static_assert(BLOCK_Q * GROUP_P == 128, "two consumer warpgroups of 64 rows")
        dtype: gl.constexpr = q_ptr.dtype.element_ty
        pid_w = gl.program_id(0)
        kv_head = gl.program_id(1)
        w = work_ptr + pid_w * 5
        req = gl.load(w)
        q_start = gl.load(w + 1)
        kv_start = gl.load(w + 2)
        kv_end = gl.load(w + 3)
        slot = gl.load(w + 4)
        q_begin = gl.load(cu_q_ptr + req)
        n_new = gl.load(cu_q_ptr + req + 1) - q_begin
        ctx = gl.load(seq_lens_ptr + req) - n_new
        n_tiles = (kv_end - kv_start + BLOCK_N - 1) // BLOCK_N
        k_head_ptr = k_cache_ptr + kv_head * stride_kh
        v_head_ptr = v_cache_ptr + kv_head * stride_vh
        table_ptr = block_tables_ptr + req * stride_btb

        smem_layout: gl.constexpr = gl.NVMMASharedLayout(
            swizzle_byte_width=128, element_bitwidth=16, rank=2
        )
        q_smem = gl.allocate_shared_memory(dtype, [2, 64, HEAD_DIM], smem_layout)
        k_smem = gl.allocate_shared_memory(dtype, [NS, BLOCK_N, HEAD_DIM], smem_layout)
        v_smem = gl.allocate_shared_memory(dtype, [NS, BLOCK_N, HEAD_DIM], smem_layout)
        pg_smem = gl.allocate_shared_memory(
            gl.int32, [BLOCK_N], gl.SwizzledSharedLayout(1, 1, 1, [0])
        )
        ready = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NS):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=2)
        for i in gl.static_range(2):
            mbarrier.init(turn.index(i), count=1)
        gl.warp_specialize(
            [
                (
                    _ws_consumer,
                    (
                        q_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, qk_scale,
                        q_begin, n_new, ctx, q_start, kv_start, kv_end, slot, kv_head, n_tiles,
                        stride_qt, stride_qh, stride_ot, stride_oh, stride_lt, stride_lh,
                        stride_pos, stride_poh, stride_pls, stride_plh,
                        q_smem, k_smem, v_smem, ready, empty, turn,
                        GROUP, GROUP_P, BLOCK_N, HEAD_DIM, CAUSAL, WRITE_LSE, NS, 0, PINGPONG,
                        SKIP_IDLE,
                    ),
                ),
                (
                    _ws_consumer,
                    (
                        q_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, qk_scale,
                        q_begin, n_new, ctx, q_start, kv_start, kv_end, slot, kv_head, n_tiles,
                        stride_qt, stride_qh, stride_ot, stride_oh, stride_lt, stride_lh,
                        stride_pos, stride_poh, stride_pls, stride_plh,
                        q_smem, k_smem, v_smem, ready, empty, turn,
                        GROUP, GROUP_P, BLOCK_N, HEAD_DIM, CAUSAL, WRITE_LSE, NS, 1, PINGPONG,
                        SKIP_IDLE,
                    ),
                ),
                (
                    _ws_producer,
                    (
                        k_head_ptr, v_head_ptr, table_ptr, kv_start, kv_end, n_tiles,
                        stride_kp, stride_kt, stride_vp, stride_vt,
                        k_smem, v_smem, pg_smem, ready, empty,
                        BLOCK_N, HEAD_DIM, PAGE_SIZE, NS, P_WARPS, LAG,
                    ),
                ),
            ],
            [4, P_WARPS],
            [C_REGS, P_REGS],
        )  # fmt: skip

    # ---- gluon = 3: persistent loop 2 (one CTA per SM takes (work item, KV head) units) ----

    @gluon.jit
    def _ps_unit(k, pid, n_prog, n_work, n_heads, ORDER: gl.constexpr):
        """(work item, KV head) of the k-th unit of program pid. ORDER 0: units u = item x
        n_heads + head (items longest first) dealt in rounds of n_prog, every other round in
        reverse (a snake: the long and the short units of a round go to different programs).
        ORDER 1: u = head x n_work + item (the non-persistent launch order: a round's programs
        share a head's K/V in L2), rounds in order."""
        if ORDER == 0:
            u = k * n_prog + pid + (k % 2) * (n_prog - 1 - 2 * pid)
            return u // n_heads, u % n_heads
        else:
            u = k * n_prog + pid
            return u % n_work, u // n_work

    @gluon.jit
    def _ps_count(pid, n_prog, n_units, ORDER: gl.constexpr):
        """Units of program pid (only the last round can be partial)."""
        full = n_units // n_prog
        last = pid + (full % 2) * (n_prog - 1 - 2 * pid) if ORDER == 0 else pid
        return full + (last < n_units - full * n_prog).to(gl.int32)

    @gluon.jit
    def _ps_producer(
        q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, cu_q_ptr, work_ptr,
        stride_qt, stride_qh, stride_kp, stride_kh, stride_kt, stride_vp, stride_vh, stride_vt,
        stride_btb, n_work, n_heads,
        q_smem, k_smem, v_smem, pg_smem, ready, empty, q_empty,
        GROUP: gl.constexpr, GROUP_P: gl.constexpr, BLOCK_N: gl.constexpr,
        HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr, NS: gl.constexpr, P_WARPS: gl.constexpr,
        LAG: gl.constexpr, ORDER: gl.constexpr,
    ):  # fmt: skip
        """Per unit: Q (both 64-row halves, into the unit's Q buffer once both consumers are
        done with the unit two back) with tile 0's copies, then every tile's K and V as in
        loop 2. Tiles are counted across units (g), so the stage ring and its phases run on and
        the next unit's first tiles are copied while the consumers finish this one. A tile is
        marked ready once LAG later tiles' copies were issued (loop 2: 1), so LAG + 1 tiles'
        copies can be in flight (LAG <= NS - 2: the consumers release a stage only after
        waiting for the next tile)."""
        CH: gl.constexpr = 16
        TPW_D: gl.constexpr = HEAD_DIM // 8 if HEAD_DIM // 8 < 32 else 32
        ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [P_WARPS, 1], [1, 0])
        pl: gl.constexpr = gl.BlockedLayout([1], [32], [P_WARPS], [0])
        offs_c = gl.arange(0, CH, layout=gl.SliceLayout(1, ld))
        offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld))
        offs_p = gl.arange(0, BLOCK_N, layout=pl)
        pid = gl.program_id(0)
        n_prog = gl.num_programs(0)
        n_mine = _ps_count(pid, n_prog, n_work * n_heads, ORDER)
        g = 0  # tiles issued (all units so far)
        rdy = 0  # tiles marked ready
        n_prev = 0  # tiles of the previous unit
        for k in range(n_mine):
            item, kv_head = _ps_unit(k, pid, n_prog, n_work, n_heads, ORDER)
            w = work_ptr + item * 5
            req = gl.load(w)
            q_start = gl.load(w + 1)
            kv_start = gl.load(w + 2)
            kv_end = gl.load(w + 3)
            q_begin = gl.load(cu_q_ptr + req)
            n_new = gl.load(cu_q_ptr + req + 1) - q_begin
            n_tiles = (kv_end - kv_start + BLOCK_N - 1) // BLOCK_N
            k_head_ptr = k_cache_ptr + kv_head * stride_kh
            v_head_ptr = v_cache_ptr + kv_head * stride_vh
            table_ptr = block_tables_ptr + req * stride_btb
            t0 = kv_start + offs_p
            pg_first = gl.load(table_ptr + t0 // PAGE_SIZE, mask=t0 < kv_end, other=0)
            # This unit's Q buffer is free once the consumers finished unit k - 2, which needs
            # all its tiles ready: when unit k - 1 has fewer than LAG tiles, some are not yet
            # marked (they would be after this unit's copies): mark them now.
            if rdy < g - n_prev:
                async_copy.wait_group(0)
                gl.thread_barrier()
                fence_async_shared()
                for j in range(rdy, g):
                    mbarrier.arrive(ready.index(j % NS))
                rdy = g
            qb = k % 2
            mbarrier.wait(q_empty.index(qb), ((k // 2) & 1) ^ 1)
            gl.thread_barrier()
            pg_smem.store(pg_first)
            for c in gl.static_range(128 // CH):
                r = c * CH + offs_c
                q_tok = q_start + r // GROUP_P
                q_ok = (q_tok < n_new) & ((r % GROUP_P) < GROUP)
                q_rows = (q_begin + q_tok).to(gl.int64) * stride_qt + (
                    kv_head * GROUP + r % GROUP_P
                ) * stride_qh
                async_copy.async_copy_global_to_shared(
                    q_smem.index(qb * 2 + c // (64 // CH)).slice((c % (64 // CH)) * CH, CH),
                    q_ptr + q_rows[:, None] + offs_d[None, :],
                    mask=q_ok[:, None],
                )
            for t in range(n_tiles):
                gt = g + t
                st = gt % NS
                tok0 = kv_start + t * BLOCK_N
                tn = tok0 + BLOCK_N + offs_p  # the next tile's page ids: loaded under the copies
                pg_next = gl.load(table_ptr + tn // PAGE_SIZE, mask=tn < kv_end, other=0)
                mbarrier.wait(empty.index(st), ((gt // NS) & 1) ^ 1)
                gl.thread_barrier()
                for c in gl.static_range(BLOCK_N // CH):
                    tt = tok0 + c * CH + offs_c
                    ok = tt < kv_end
                    page = pg_smem.slice(c * CH, CH).load(gl.SliceLayout(1, ld)).to(gl.int64)
                    krow = page * stride_kp + (tt % PAGE_SIZE) * stride_kt
                    async_copy.async_copy_global_to_shared(
                        k_smem.index(st).slice(c * CH, CH),
                        k_head_ptr + krow[:, None] + offs_d[None, :],
                        mask=ok[:, None],
                    )
                    vrow = page * stride_vp + (tt % PAGE_SIZE) * stride_vt
                    async_copy.async_copy_global_to_shared(
                        v_smem.index(st).slice(c * CH, CH),
                        v_head_ptr + vrow[:, None] + offs_d[None, :],
                        mask=ok[:, None],
                    )
                async_copy.commit_group()
                gl.thread_barrier()  # every thread read this tile's page ids
                pg_smem.store(pg_next)
                if gt - LAG >= rdy:  # tile gt - LAG landed once <= LAG groups are in flight
                    async_copy.wait_group(LAG)
                    gl.thread_barrier()
                    fence_async_shared()
                    mbarrier.arrive(ready.index((gt - LAG) % NS))
                    rdy = gt - LAG + 1
            g += n_tiles
            n_prev = n_tiles
        async_copy.wait_group(0)
        gl.thread_barrier()
        fence_async_shared()
        for j in range(rdy, g):
            mbarrier.arrive(ready.index(j % NS))

    @gluon.jit
    def _ps_consumer(
        q_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, qk_scale,
        seq_lens_ptr, cu_q_ptr, work_ptr, n_work, n_heads,
        stride_ot, stride_oh, stride_lt, stride_lh,
        stride_pos, stride_poh, stride_pls, stride_plh,
        q_smem, k_smem, v_smem, ready, empty, q_empty,
        GROUP: gl.constexpr, GROUP_P: gl.constexpr, BLOCK_N: gl.constexpr,
        HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, WRITE_LSE: gl.constexpr,
        NS: gl.constexpr, C: gl.constexpr, ORDER: gl.constexpr,
    ):  # fmt: skip
        """Loop 2's consumer over this program's units: Q comes from the copy partition (it
        lands with the unit's first tile), the last tile's stage and the Q buffer are released
        at the unit's end, then the rows are written while the next unit's tiles come in."""
        ROWS: gl.constexpr = 64
        dtype: gl.constexpr = q_ptr.dtype.element_ty
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
        )
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
        o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
        offs_r = C * ROWS + gl.arange(0, ROWS, layout=s_rows)
        offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        om = C * ROWS + gl.arange(0, ROWS, layout=o_rows)
        od = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
        pid = gl.program_id(0)
        n_prog = gl.num_programs(0)
        n_mine = _ps_count(pid, n_prog, n_work * n_heads, ORDER)
        g = 0
        for k in range(n_mine):
            item, kv_head = _ps_unit(k, pid, n_prog, n_work, n_heads, ORDER)
            w = work_ptr + item * 5
            req = gl.load(w)
            q_start = gl.load(w + 1)
            kv_start = gl.load(w + 2)
            kv_end = gl.load(w + 3)
            slot = gl.load(w + 4)
            q_begin = gl.load(cu_q_ptr + req)
            n_new = gl.load(cu_q_ptr + req + 1) - q_begin
            ctx = gl.load(seq_lens_ptr + req) - n_new
            n_tiles = (kv_end - kv_start + BLOCK_N - 1) // BLOCK_N
            qb = k % 2
            qs = q_smem.index(qb * 2 + C)
            pos = ctx + q_start + offs_r // GROUP_P
            free_end = gl.minimum(kv_end, ctx + q_start + 1) if CAUSAL else kv_end
            free_end = kv_start + ((free_end - kv_start) // BLOCK_N) * BLOCK_N
            acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=o_layout)
            m_i = gl.full([ROWS], float("-inf"), gl.float32, layout=s_rows)

            st0 = g % NS
            mbarrier.wait(ready.index(st0), (g // NS) & 1)
            s = warpgroup_mma(qs, k_smem.index(st0).permute((1, 0)), s_zero, use_acc=False)
            p, m_i = _ws_softmax_tile(
                s, m_i, kv_start, free_end, kv_end, pos, offs_n, qk_scale, CAUSAL
            )
            l_i = gl.sum(p, axis=1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            for t in range(1, n_tiles):
                gt = g + t
                st = gt % NS
                pst = (gt - 1) % NS
                mbarrier.wait(ready.index(st), (gt // NS) & 1)
                s_tok = warpgroup_mma(
                    qs, k_smem.index(st).permute((1, 0)), s_zero, use_acc=False, is_async=True
                )
                acc_tok = warpgroup_mma(p_op, v_smem.index(pst), acc, is_async=True)
                s = warpgroup_mma_wait(num_outstanding=1, deps=[s_tok])
                p, m_new = _ws_softmax_tile(
                    s, m_i, kv_start + t * BLOCK_N, free_end, kv_end, pos, offs_n, qk_scale,
                    CAUSAL,
                )  # fmt: skip
                alpha = gl.exp2(m_i - m_new)
                l_i = l_i * alpha + gl.sum(p, axis=1)
                m_i = m_new
                p_op = gl.convert_layout(p.to(dtype), p_layout)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc_tok])
                mbarrier.arrive(empty.index(pst))
                acc = acc * gl.convert_layout(alpha, o_rows)[:, None]
            lst = (g + n_tiles - 1) % NS
            acc = warpgroup_mma(p_op, v_smem.index(lst), acc)
            mbarrier.arrive(empty.index(lst))
            mbarrier.arrive(q_empty.index(qb))
            g += n_tiles

            acc = acc / gl.convert_layout(l_i, o_rows)[:, None]
            lse2 = m_i + gl.log2(l_i)
            o_tok = q_start + om // GROUP_P
            o_ok = (o_tok < n_new) & ((om % GROUP_P) < GROUP)
            o_head = kv_head * GROUP + om % GROUP_P
            l_tok = q_start + offs_r // GROUP_P
            l_ok = (l_tok < n_new) & ((offs_r % GROUP_P) < GROUP)
            l_head = kv_head * GROUP + offs_r % GROUP_P
            if slot < 0:
                o_off = (q_begin + o_tok).to(gl.int64) * stride_ot + o_head * stride_oh
                gl.store(
                    out_ptr + o_off[:, None] + od[None, :],
                    acc.to(out_ptr.dtype.element_ty),
                    mask=o_ok[:, None],
                )
                if WRITE_LSE:
                    l_off = (q_begin + l_tok).to(gl.int64) * stride_lt + l_head * stride_lh
                    gl.store(lse_ptr + l_off, lse2 * 0.6931471805599453, mask=l_ok)
            else:
                po = part_out_ptr + slot.to(gl.int64) * stride_pos + kv_head * stride_poh
                gl.store(po + om[:, None] * HEAD_DIM + od[None, :], acc, mask=o_ok[:, None])
                pl = part_lse_ptr + slot.to(gl.int64) * stride_pls + kv_head * stride_plh
                gl.store(pl + offs_r, lse2, mask=l_ok)

    @gluon.jit
    def _ps_prefill_kernel(
        q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, cu_q_ptr, work_ptr,
        out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, qk_scale,
        stride_qt, stride_qh, stride_kp, stride_kh, stride_kt, stride_vp, stride_vh, stride_vt,
        stride_btb, stride_ot, stride_oh, stride_lt, stride_lh,
        stride_pos, stride_poh, stride_pls, stride_plh, n_work, n_heads,
        GROUP: gl.constexpr, GROUP_P: gl.constexpr, BLOCK_Q: gl.constexpr,
        BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr,
        CAUSAL: gl.constexpr, WRITE_LSE: gl.constexpr, NUM_WARPS: gl.constexpr,
        NS: gl.constexpr, P_WARPS: gl.constexpr, C_REGS: gl.constexpr, P_REGS: gl.constexpr,
        LAG: gl.constexpr, ORDER: gl.constexpr,
    ):  # fmt: skip
        gl.static_assert(BLOCK_Q * GROUP_P == 128, "two consumer warpgroups of 64 rows")
        gl.static_assert(LAG >= 1 and LAG <= NS - 2, "ready lag: 1 .. NS - 2 (NS - 3: no stall)")
        dtype: gl.constexpr = q_ptr.dtype.element_ty
        smem_layout: gl.constexpr = gl.NVMMASharedLayout(
            swizzle_byte_width=128, element_bitwidth=16, rank=2
        )
        # Q: two units' buffers x two 64-row halves.
        q_smem = gl.allocate_shared_memory(dtype, [4, 64, HEAD_DIM], smem_layout)
        k_smem = gl.allocate_shared_memory(dtype, [NS, BLOCK_N, HEAD_DIM], smem_layout)
        v_smem = gl.allocate_shared_memory(dtype, [NS, BLOCK_N, HEAD_DIM], smem_layout)
        pg_smem = gl.allocate_shared_memory(
            gl.int32, [BLOCK_N], gl.SwizzledSharedLayout(1, 1, 1, [0])
        )
        ready = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NS):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=2)
        for i in gl.static_range(2):
            mbarrier.init(q_empty.index(i), count=2)
        gl.warp_specialize(
            [
                (
                    _ps_consumer,
                    (
                        q_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, qk_scale,
                        seq_lens_ptr, cu_q_ptr, work_ptr, n_work, n_heads,
                        stride_ot, stride_oh, stride_lt, stride_lh,
                        stride_pos, stride_poh, stride_pls, stride_plh,
                        q_smem, k_smem, v_smem, ready, empty, q_empty,
                        GROUP, GROUP_P, BLOCK_N, HEAD_DIM, CAUSAL, WRITE_LSE, NS, 0, ORDER,
                    ),
                ),
                (
                    _ps_consumer,
                    (
                        q_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, qk_scale,
                        seq_lens_ptr, cu_q_ptr, work_ptr, n_work, n_heads,
                        stride_ot, stride_oh, stride_lt, stride_lh,
                        stride_pos, stride_poh, stride_pls, stride_plh,
                        q_smem, k_smem, v_smem, ready, empty, q_empty,
                        GROUP, GROUP_P, BLOCK_N, HEAD_DIM, CAUSAL, WRITE_LSE, NS, 1, ORDER,
                    ),
                ),
                (
                    _ps_producer,
                    (
                        q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
                        cu_q_ptr, work_ptr,
                        stride_qt, stride_qh, stride_kp, stride_kh, stride_kt, stride_vp,
                        stride_vh, stride_vt, stride_btb, n_work, n_heads,
                        q_smem, k_smem, v_smem, pg_smem, ready, empty, q_empty,
                        GROUP, GROUP_P, BLOCK_N, HEAD_DIM, PAGE_SIZE, NS, P_WARPS, LAG, ORDER,
                    ),
                ),
            ],
            [4, P_WARPS],
            [C_REGS, P_REGS],
        )  # fmt: skip

    KERNEL: Any = _gluon_prefill_kernel
    WS_KERNEL: Any = _ws_prefill_kernel
    PS_KERNEL: Any = _ps_prefill_kernel
else:  # pragma: no cover
    KERNEL = None
    WS_KERNEL = None
    PS_KERNEL = None
