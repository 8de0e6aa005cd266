"""Fused elementwise kernels of a Llama decoder layer, bit-faithful to engine/layers.py's torch.

Three kernels replace the small unfused torch kernels around the GEMMs and attention:

    add_rms_norm(x, residual, weight, eps) -> (normed, residual)
        residual += x (bf16, rounded as torch rounds it), normed = rms_norm(residual).
    rms_norm(x, weight, eps, out=None) -> normed
    rope_and_write_kv(qkv, positions, k_pool, v_pool, slot_pages, slot_offsets,
                      num_q_heads, num_kv_heads, head_dim, theta, cos=None, sin=None) -> q
        Rotates q and k of the fused QKV projection (halves convention), returns q [T, hq, d]
        and writes rotated k and raw v into the layer's pool at (slot_pages[t], :,
        slot_offsets[t], :).
    silu_mul(gate_up, out=None) -> silu(gate) * up   (gate = first half of the last dim)

Numerics (activations are bf16; weights of the norm bf16 or float32):
  * Every op the torch formula rounds separately is rounded separately here: float32 products
    and sums are never contracted into FMAs (kernels are compiled with enable_fp_fusion=False),
    and every bf16 rounding of the torch path (the residual add, the norm's output, rotary's
    output, silu's output, the product) happens at the same point, round-to-nearest-even.
    The bf16 <-> float32 conversions are done with integer bit operations (_to_f32 / _to_bf16):
    exact and identical on the GPU and under TRITON_INTERPRET=1 (whose own float32 -> bf16 cast
    truncates), so the CPU tests check the same arithmetic the GPU runs.
  * Bit-exact with torch: the residual add, rotary with a cos/sin table from
    engine.layers.rope_cos_sin (the engine computes it once per step), the KV write, and the
    product of silu_mul.
  * Not bit-exact, at most 1 bf16 ulp apart (the tests assert it): rms_norm (the float32 sum of
    squares is reduced in a different order than torch's reduction, and rsqrt is approximate on
    both sides; the float32 results differ by ~1e-6 relative, so the bf16 rounding can only land
    on a neighbour), silu (exp: libdevice __nv_expf on the GPU, the same CUDA math library torch
    calls, numpy's exp under the interpreter) and rotary with in-kernel cos/sin (no table given:
    angles = float32(position) * inv_freq exactly as torch, inv_freq computed by the torch
    formula, then libdevice cos/sin vs torch's cosf/sinf).

CUDA-graph safety: launchers only check shapes, dtypes and devices (no host syncs, no .item()),
allocate nothing but the outputs (pass out= / q_out= to allocate nothing), and their grids depend
on shapes only. rope_and_write_kv without a cos/sin table builds a [head_dim / 2] inv_freq table
once per (device, head_dim, theta) and caches it: call it once before capturing a graph.

Imports torch, triton and numpy only (it runs on the GPU machine alone). `python -m kernels.fused
--bench` times the torch formulas against the kernels at llama-3-8b sizes inside CUDA graphs.
"""

from __future__ import annotations

import argparse
import os

import torch

# Without a GPU the kernels run under Triton's interpreter (CPU CI). The interpreter is chosen
# when `triton.jit` decorates a function, so the variable must be set before triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra import libdevice  # noqa: E402

from kernels.reference import apply_rope as torch_apply_rope  # noqa: E402
from kernels.reference import rms_norm as torch_rms_norm  # noqa: E402
from kernels.reference import rope_cos_sin as torch_rope_cos_sin  # noqa: E402

SUPPORTED_DTYPES = (torch.bfloat16,)
MAX_HIDDEN = 16384
# Never contract a float32 multiply and add into an FMA: torch rounds each op separately.
_COMPILE = {"enable_fp_fusion": False}


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


# --------------------------------------------------------------------------------------------
# Exact conversions and math helpers
# --------------------------------------------------------------------------------------------


@triton.jit
def _to_f32(x):
    """bf16 -> float32 (exact: the bf16 bits are the float32's top half)."""
    return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _to_bf16(x):
    """float32 -> bf16, round to nearest even (as torch's c10::BFloat16 and cvt.rn.bf16.f32);
    NaN -> 0x7FC0."""
    u = x.to(tl.uint32, bitcast=True)
    r = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    r = tl.where((u & 0x7FFFFFFF) > 0x7F800000, 0x7FC0, r)
    return r.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _rsqrt(x, USE_LIBDEVICE: tl.constexpr):
    if USE_LIBDEVICE:  # noqa: SIM108 (a constexpr branch: only one side is compiled)
        y = libdevice.rsqrt(x)
    else:
        y = tl.rsqrt(x)
    return y


@triton.jit
def _exp(x, USE_LIBDEVICE: tl.constexpr):
    # tl.exp lowers to ex2.approx on NVIDIA; libdevice's expf is what torch's CUDA exp calls.
    if USE_LIBDEVICE:  # noqa: SIM108
        y = libdevice.exp(x)
    else:
        y = tl.exp(x)
    return y


@triton.jit
def _cos_sin(x, USE_LIBDEVICE: tl.constexpr):
    if USE_LIBDEVICE:
        c = libdevice.cos(x)
        s = libdevice.sin(x)
    else:
        c = tl.cos(x)
        s = tl.sin(x)
    return c, s


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@triton.jit
def _add_rms_norm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    stride_x,
    stride_r,
    stride_o,
    n_cols,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    W_BF16: tl.constexpr,
    USE_LIBDEVICE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = _to_f32(tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0))
    if HAS_RESIDUAL:
        r = _to_f32(tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0))
        s = _to_bf16(x + r)  # torch's bf16 add: float32 sum, one rounding
        tl.store(res_ptr + row * stride_r + cols, s, mask=mask)
        x = _to_f32(s)
    # engine.layers.rms_norm: xf * rsqrt(mean(xf ** 2) + eps) * weight.float(), rounded once.
    ms = tl.sum(x * x, axis=0) / n_cols
    inv = _rsqrt(ms + eps, USE_LIBDEVICE)
    if W_BF16:
        w = _to_f32(tl.load(w_ptr + cols, mask=mask, other=0.0))
    else:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    y = (x * inv) * w
    tl.store(out_ptr + row * stride_o + cols, _to_bf16(y), mask=mask)


@triton.jit
def _rope_write_kv_kernel(
    qkv_ptr,
    q_out_ptr,
    k_pool_ptr,
    v_pool_ptr,
    pos_ptr,
    pages_ptr,
    offs_ptr,
    cos_ptr,
    sin_ptr,
    inv_freq_ptr,
    stride_qkv_t,
    stride_qo_t,
    stride_qo_h,
    stride_kp,
    stride_kh,
    stride_ks,
    stride_vp,
    stride_vh,
    stride_vs,
    stride_cs_t,
    HQ: tl.constexpr,
    HKV: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    HAS_TABLE: tl.constexpr,
    USE_LIBDEVICE: tl.constexpr,
):
    """One program per (token, KV head): its GROUP query heads, its K head and its V head."""
    t = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    j = tl.arange(0, BLOCK_HALF)
    jm = j < HALF
    if HAS_TABLE:
        c = tl.load(cos_ptr + t * stride_cs_t + j, mask=jm, other=0.0)
        s = tl.load(sin_ptr + t * stride_cs_t + j, mask=jm, other=0.0)
    else:
        pos = tl.load(pos_ptr + t).to(tl.float32)
        angles = pos * tl.load(inv_freq_ptr + j, mask=jm, other=0.0)
        c, s = _cos_sin(angles, USE_LIBDEVICE)
    row = qkv_ptr + t * stride_qkv_t

    # Query heads g*GROUP .. g*GROUP+GROUP-1 -> q_out[t, h, :]
    hh = tl.arange(0, BLOCK_G)
    qh = g * GROUP + hh
    m2 = (hh < GROUP)[:, None] & jm[None, :]
    src = row + qh[:, None] * (2 * HALF) + j[None, :]
    x1 = _to_f32(tl.load(src, mask=m2, other=0.0))
    x2 = _to_f32(tl.load(src + HALF, mask=m2, other=0.0))
    c2 = c[None, :]
    s2 = s[None, :]
    dst = q_out_ptr + t * stride_qo_t + qh[:, None] * stride_qo_h + j[None, :]
    tl.store(dst, _to_bf16(x1 * c2 - x2 * s2), mask=m2)
    tl.store(dst + HALF, _to_bf16(x2 * c2 + x1 * s2), mask=m2)

    # K head g, rotated, and V head g, raw, into slot (page, offset) of the pool.
    page = tl.load(pages_ptr + t).to(tl.int64)
    off = tl.load(offs_ptr + t).to(tl.int64)
    ksrc = row + (HQ + g) * (2 * HALF) + j
    k1 = _to_f32(tl.load(ksrc, mask=jm, other=0.0))
    k2 = _to_f32(tl.load(ksrc + HALF, mask=jm, other=0.0))
    kdst = k_pool_ptr + page * stride_kp + g * stride_kh + off * stride_ks + j
    tl.store(kdst, _to_bf16(k1 * c - k2 * s), mask=jm)
    tl.store(kdst + HALF, _to_bf16(k2 * c + k1 * s), mask=jm)
    vsrc = row + (HQ + HKV + g) * (2 * HALF) + j
    vdst = v_pool_ptr + page * stride_vp + g * stride_vh + off * stride_vs + j
    tl.store(vdst, tl.load(vsrc, mask=jm), mask=jm)
    tl.store(vdst + HALF, tl.load(vsrc + HALF, mask=jm), mask=jm)


@triton.jit
def _silu_mul_kernel(
    gu_ptr,
    out_ptr,
    stride_gu,
    stride_o,
    n_cols,
    USE_LIBDEVICE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = _to_f32(tl.load(gu_ptr + t * stride_gu + cols, mask=mask, other=0.0))
    u = _to_f32(tl.load(gu_ptr + t * stride_gu + n_cols + cols, mask=mask, other=0.0))
    # F.silu on bf16: x / (1 + exp(-x)) in float32, rounded; then a bf16 multiply.
    silu = _to_f32(_to_bf16(g / (1.0 + _exp(-g, USE_LIBDEVICE))))
    tl.store(out_ptr + t * stride_o + cols, _to_bf16(silu * u), mask=mask)


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------


def _norm_warps(block: int) -> int:
    return max(1, min(16, block // 512))


def _check_norm_args(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None) -> None:
    _check(x.dim() == 2, f"x must be [tokens, hidden], got {tuple(x.shape)}")
    _check(x.dtype in SUPPORTED_DTYPES, f"x dtype {x.dtype} not in {SUPPORTED_DTYPES}")
    _check(x.stride(1) == 1, "x's last dim must be contiguous")
    n = x.shape[1]
    _check(1 <= n <= MAX_HIDDEN, f"hidden {n} outside [1, {MAX_HIDDEN}]")
    _check(tuple(weight.shape) == (n,), f"weight must be [{n}], got {tuple(weight.shape)}")
    _check(weight.dtype in (torch.bfloat16, torch.float32), f"weight dtype {weight.dtype}")
    _check(weight.is_contiguous(), "weight must be contiguous")
    _check(weight.device == x.device, "weight on another device")
    if out is not None:
        _check(out.shape == x.shape and out.dtype == x.dtype, "out must match x")
        _check(out.stride(1) == 1 and out.device == x.device, "out: contiguous rows, x's device")


def _launch_norm(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor,
) -> None:
    t, n = x.shape
    if t == 0:
        return
    block = triton.next_power_of_2(n)
    res = residual if residual is not None else x
    _add_rms_norm_kernel[(t,)](
        x,
        res,
        weight,
        out,
        x.stride(0),
        res.stride(0),
        out.stride(0),
        n,
        float(eps),
        HAS_RESIDUAL=residual is not None,
        W_BF16=weight.dtype == torch.bfloat16,
        USE_LIBDEVICE=not _interpreting(),
        BLOCK=block,
        num_warps=_norm_warps(block),
        **_COMPILE,
    )


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """[tokens, hidden] bf16 -> rms_norm(x) * weight, as engine.layers.rms_norm (<= 1 bf16 ulp)."""
    _check_norm_args(x, weight, out)
    if out is None:
        out = torch.empty_like(x)
    _launch_norm(x, None, weight, eps, out)
    return out


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual <- residual + x (in place, bf16); returns (rms_norm(residual) * weight, residual).

    The add is bit-exact with torch's `residual + x`; the norm is within 1 bf16 ulp of
    engine.layers.rms_norm (float32 reduction order)."""
    _check_norm_args(x, weight, out)
    _check(residual.shape == x.shape and residual.dtype == x.dtype, "residual must match x")
    _check(residual.stride(1) == 1 and residual.device == x.device, "residual: contiguous rows")
    if out is None:
        out = torch.empty_like(x)
    _launch_norm(x, residual, weight, eps, out)
    return out, residual


_INV_FREQ: dict[tuple[str, int, float], torch.Tensor] = {}


def rope_inv_freq(head_dim: int, theta: float, device: torch.device | str) -> torch.Tensor:
    """float32 [head_dim // 2], by engine.layers.rope_cos_sin's formula; cached per key."""
    dev = torch.device(device)
    key = (str(dev), head_dim, float(theta))
    table = _INV_FREQ.get(key)
    if table is None:
        exps = -torch.arange(0, head_dim, 2, device=dev, dtype=torch.float32) / head_dim
        table = _INV_FREQ[key] = theta**exps
    return table


def rope_and_write_kv(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    k_pool_layer: torch.Tensor,
    v_pool_layer: torch.Tensor,
    slot_pages: torch.Tensor,
    slot_offsets: torch.Tensor,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    theta: float,
    *,
    cos: torch.Tensor | None = None,
    sin: torch.Tensor | None = None,
    q_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotary on q and k of qkv [T, (hq + 2 hkv) * d] (bf16); returns q [T, hq, d] and writes
    rotated k and raw v to k_pool_layer / v_pool_layer [num_pages, hkv, page_size, d] at
    [slot_pages[t], :, slot_offsets[t], :].

    cos/sin: float32 [T, d / 2] tables from engine.layers.rope_cos_sin(positions, d, theta)
    (bit-exact with torch); without them the kernel computes cos/sin of
    float32(position) * inv_freq itself (within 1 bf16 ulp). Rows are written wherever their
    slot says (padded rows of a graph point at a scratch page); two rows naming the same slot
    leave one of them there, as torch's index_put does.
    """
    hq, hkv, d = num_q_heads, num_kv_heads, head_dim
    _check(hq > 0 and hkv > 0 and hq % hkv == 0, f"GQA needs hq % hkv == 0 ({hq}, {hkv})")
    _check(d >= 2 and d % 2 == 0, f"head_dim {d} must be even")
    _check(qkv.dim() == 2, f"qkv must be [tokens, (hq + 2 hkv) * d], got {tuple(qkv.shape)}")
    t = qkv.shape[0]
    _check(qkv.shape[1] == (hq + 2 * hkv) * d, f"qkv width {qkv.shape[1]} != {(hq + 2 * hkv) * d}")
    _check(qkv.dtype in SUPPORTED_DTYPES, f"qkv dtype {qkv.dtype} not in {SUPPORTED_DTYPES}")
    _check(qkv.stride(1) == 1, "qkv's last dim must be contiguous")
    dev = qkv.device
    for name, pool in (("k_pool_layer", k_pool_layer), ("v_pool_layer", v_pool_layer)):
        _check(pool.dim() == 4, f"{name} must be [num_pages, hkv, page_size, d]")
        _check(pool.shape[1] == hkv and pool.shape[3] == d, f"{name} {tuple(pool.shape)}")
        _check(pool.dtype == qkv.dtype and pool.device == dev, f"{name}: qkv's dtype/device")
        _check(pool.stride(3) == 1, f"{name}'s last dim must be contiguous")
    for name, idx in (
        ("positions", positions),
        ("slot_pages", slot_pages),
        ("slot_offsets", slot_offsets),
    ):
        _check(tuple(idx.shape) == (t,), f"{name} must be [{t}], got {tuple(idx.shape)}")
        _check(idx.dtype in (torch.int32, torch.int64), f"{name} dtype {idx.dtype}")
        _check(idx.device == dev and idx.is_contiguous(), f"{name}: contiguous, on qkv's device")
    has_table = cos is not None or sin is not None
    if has_table:
        _check(cos is not None and sin is not None, "give both cos and sin, or neither")
        assert cos is not None and sin is not None
        for name, tab in (("cos", cos), ("sin", sin)):
            _check(tuple(tab.shape) == (t, d // 2), f"{name} must be [{t}, {d // 2}]")
            _check(tab.dtype == torch.float32 and tab.device == dev, f"{name}: float32, on dev")
            _check(tab.stride(1) == 1, f"{name}'s last dim must be contiguous")
        _check(cos.stride(0) == sin.stride(0), "cos and sin must share a row stride")
        inv_freq = cos  # unused by the kernel
    else:
        inv_freq = rope_inv_freq(d, theta, dev)
    if q_out is None:
        q_out = torch.empty((t, hq, d), device=dev, dtype=qkv.dtype)
    else:
        _check(tuple(q_out.shape) == (t, hq, d), f"q_out must be [{t}, {hq}, {d}]")
        _check(q_out.dtype == qkv.dtype and q_out.device == dev, "q_out: qkv's dtype/device")
        _check(q_out.stride(2) == 1, "q_out's last dim must be contiguous")
    if t == 0:
        return q_out
    group = hq // hkv
    _rope_write_kv_kernel[(t, hkv)](
        qkv,
        q_out,
        k_pool_layer,
        v_pool_layer,
        positions,
        slot_pages,
        slot_offsets,
        cos if cos is not None else inv_freq,
        sin if sin is not None else inv_freq,
        inv_freq,
        qkv.stride(0),
        q_out.stride(0),
        q_out.stride(1),
        k_pool_layer.stride(0),
        k_pool_layer.stride(1),
        k_pool_layer.stride(2),
        v_pool_layer.stride(0),
        v_pool_layer.stride(1),
        v_pool_layer.stride(2),
        cos.stride(0) if cos is not None else 0,
        HQ=hq,
        HKV=hkv,
        GROUP=group,
        BLOCK_G=triton.next_power_of_2(group),
        HALF=d // 2,
        BLOCK_HALF=triton.next_power_of_2(d // 2),
        HAS_TABLE=has_table,
        USE_LIBDEVICE=not _interpreting(),
        num_warps=4,
        **_COMPILE,
    )
    return q_out


SILU_BLOCK = 1024


def silu_mul(gate_up: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """[T, 2I] bf16 (gate, then up) -> [T, I]: F.silu(gate) * up as torch computes it in bf16."""
    _check(gate_up.dim() == 2, f"gate_up must be [tokens, 2 * I], got {tuple(gate_up.shape)}")
    _check(gate_up.dtype in SUPPORTED_DTYPES, f"gate_up dtype {gate_up.dtype}")
    _check(gate_up.shape[1] % 2 == 0, "gate_up's width must be even")
    _check(gate_up.stride(1) == 1, "gate_up's last dim must be contiguous")
    t, n = gate_up.shape[0], gate_up.shape[1] // 2
    if out is None:
        out = torch.empty((t, n), device=gate_up.device, dtype=gate_up.dtype)
    else:
        _check(tuple(out.shape) == (t, n), f"out must be [{t}, {n}]")
        _check(out.dtype == gate_up.dtype and out.device == gate_up.device, "out: dtype/device")
        _check(out.stride(1) == 1, "out's last dim must be contiguous")
    if t == 0 or n == 0:
        return out
    block = min(SILU_BLOCK, triton.next_power_of_2(n))
    _silu_mul_kernel[(t, triton.cdiv(n, block))](
        gate_up,
        out,
        gate_up.stride(0),
        out.stride(0),
        n,
        USE_LIBDEVICE=not _interpreting(),
        BLOCK=block,
        num_warps=4,
        **_COMPILE,
    )
    return out


# --------------------------------------------------------------------------------------------
# The torch formulas (kernels/reference.py) and a bench
# --------------------------------------------------------------------------------------------


def bf16_ulp_diff(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in bf16 ulps (steps of the bf16 grid) between a and b; NaN == NaN."""
    ia = a.view(torch.int16).to(torch.int32)
    ib = b.view(torch.int16).to(torch.int32)
    # Map sign-magnitude bit patterns onto a monotone integer line.
    ia = torch.where(ia < 0, -(ia & 0x7FFF), ia)
    ib = torch.where(ib < 0, -(ib & 0x7FFF), ib)
    both_nan = a.isnan() & b.isnan()
    diff = torch.where(both_nan, 0, (ia - ib).abs())
    return int(diff.max()) if diff.numel() else 0


def _graph_time_us(fn, reps: int = 20, iters: int = 10) -> float:
    """Microseconds per call of fn, replayed inside a CUDA graph of `reps` calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / (iters * reps)


def bench(tokens: tuple[int, ...] = (1, 16, 64, 256, 2048)) -> None:
    """torch formulas vs fused kernels at llama-3-8b sizes, per call, inside CUDA graphs."""
    g = torch.Generator(device="cuda").manual_seed(0)
    print(f"{'op':<22}{'T':>6}{'torch us':>11}{'fused us':>11}{'speedup':>9}{'max ulp':>9}")
    for t in tokens:
        _bench_tokens(t, g, torch.device("cuda"), _graph_time_us)


def _bench_tokens(t: int, g: torch.Generator, dev: torch.device, timer) -> None:
    hidden, hq, hkv, d, inter = 4096, 32, 8, 128, 14336
    theta, eps, page, layers = 500_000.0, 1e-5, 16, 32
    bf = torch.bfloat16
    x = torch.randn(t, hidden, device=dev, dtype=bf, generator=g)
    res = torch.randn(t, hidden, device=dev, dtype=bf, generator=g)
    w = (torch.randn(hidden, device=dev, dtype=bf, generator=g) * 0.1 + 1).to(bf)
    qkv = torch.randn(t, (hq + 2 * hkv) * d, device=dev, dtype=bf, generator=g)
    gu = torch.randn(t, 2 * inter, device=dev, dtype=bf, generator=g)
    num_pages = t // page + 2
    kp = torch.zeros(num_pages, hkv, page, d, device=dev, dtype=bf)
    vp = torch.zeros_like(kp)
    kp2, vp2 = torch.zeros_like(kp), torch.zeros_like(kp)
    pos = torch.arange(t, device=dev) * 7 + 3
    slots = torch.randperm(num_pages * page, device=dev, generator=g)[:t]
    pages, offs = slots // page, slots % page
    cos, sin = torch_rope_cos_sin(pos, d, theta)
    normed, q_out = torch.empty_like(x), torch.empty(t, hq, d, device=dev, dtype=bf)
    mlp_out = torch.empty(t, inter, device=dev, dtype=bf)
    res_t, res_f = res.clone(), res.clone()

    def torch_norm(r: torch.Tensor = res_t) -> torch.Tensor:
        r.add_(x)  # the engine's x = x + y (one add kernel), then the norm
        return torch_rms_norm(r, w, eps)

    def fused_norm(r: torch.Tensor = res_f) -> tuple[torch.Tensor, torch.Tensor]:
        return add_rms_norm(x, r, w, eps, out=normed)

    def torch_rope():
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        qr = torch_apply_rope(q.view(-1, hq, d), cos, sin)
        kr = torch_apply_rope(k.view(-1, hkv, d), cos, sin)
        kp2[pages, :, offs] = kr
        vp2[pages, :, offs] = v.view(-1, hkv, d)
        return qr

    def fused_rope():
        return rope_and_write_kv(
            qkv, pos, kp, vp, pages, offs, hq, hkv, d, theta, cos=cos, sin=sin, q_out=q_out
        )

    def torch_silu():
        gate, up = gu.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up

    def fused_silu():
        return silu_mul(gu, out=mlp_out)

    # Accuracy on fresh copies (one call each), then timing.
    r1, r2 = res.clone(), res.clone()
    ulp_norm = bf16_ulp_diff(add_rms_norm(x, r1, w, eps)[0], torch_rms_norm(r2 + x, w, eps))
    ulp_rope = max(bf16_ulp_diff(fused_rope(), torch_rope()), bf16_ulp_diff(kp, kp2))
    ulp_rope = max(ulp_rope, bf16_ulp_diff(vp, vp2))
    ulp_silu = bf16_ulp_diff(fused_silu(), torch_silu())
    total_t = total_f = 0.0
    for name, ft, ff, ulp, per_layer in (
        ("add_rms_norm", torch_norm, fused_norm, ulp_norm, 2),
        ("rope_and_write_kv", torch_rope, fused_rope, ulp_rope, 1),
        ("silu_mul", torch_silu, fused_silu, ulp_silu, 1),
    ):
        tt, tf = timer(ft), timer(ff)
        total_t += per_layer * tt
        total_f += per_layer * tf
        print(f"{name:<22}{t:>6}{tt:>11.2f}{tf:>11.2f}{tt / tf:>9.2f}{ulp:>9}")
    ms_t, ms_f = total_t * layers / 1000, total_f * layers / 1000
    print(
        f"{'':<22}{t:>6}  per step ({layers} layers): torch {ms_t:.3f} ms, fused {ms_f:.3f} ms,"
        f" saves {ms_t - ms_f:.3f} ms"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", action="store_true", help="time torch vs fused (CUDA)")
    parser.add_argument("--tokens", type=int, nargs="*", default=[1, 16, 64, 256, 2048])
    args = parser.parse_args(argv)
    if args.bench:
        if not torch.cuda.is_available():
            raise SystemExit("--bench needs a CUDA device")
        bench(tuple(args.tokens))
    else:
        parser.print_help()


if __name__ == "__main__":
    main()
