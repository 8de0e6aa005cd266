"""Fused elementwise kernels (kernels/fused.py) vs engine/layers.py's torch formulas.

On CPU the kernels run under TRITON_INTERPRET=1 (tests/kernels/conftest.py), on a GPU natively.
Tolerances, in bf16 ulps (steps of the bf16 grid, kernels.fused.bf16_ulp_diff):
  * 0 (bit-exact) for the residual add, rotary with engine.layers.rope_cos_sin's table, the KV
    writes and the raw V copy: the kernels do the same float32 ops in the same order, each
    rounded once, and round to bf16 at the same points (round to nearest even).
  * 1 for rms_norm and silu: the float32 sum of squares is reduced in another order than torch's
    (and rsqrt / exp are different implementations on the two sides), so the float32 value before
    the bf16 rounding differs by ~1e-6 relative; a 1-ulp bf16 step is 2**-8 relative, so the
    rounding can only land on the neighbouring bf16 value. Same for in-kernel cos/sin.
Outputs are poisoned with NaN first, so any element a kernel leaves unwritten fails.
"""

import pytest
import torch

from engine import layers
from kernels import fused
from kernels.fused import bf16_ulp_diff

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
BF = torch.bfloat16
THETA = 500_000.0
EPS = 1e-5


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(seed)


def randn(*shape, g, scale=1.0, dtype=BF):
    return (torch.randn(*shape, generator=g, device=DEVICE) * scale).to(dtype)


def nan_like(t: torch.Tensor) -> torch.Tensor:
    return torch.full_like(t, float("nan"))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-exact, except that any NaN equals any NaN (torch's CPU and CUDA NaN bits differ)."""
    nan = a.isnan()
    return bool(torch.equal(nan, b.isnan()) and torch.equal(a[~nan], b[~nan]))


# ---------------------------------------------------------------------------------------------
# rms_norm / add_rms_norm
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("hidden", [64, 96, 256])
@pytest.mark.parametrize("tokens", [1, 7])
@pytest.mark.parametrize("w_dtype", [BF, torch.float32])
def test_add_rms_norm_matches_torch(hidden, tokens, w_dtype):
    g = gen(hidden + tokens)
    x = randn(tokens, hidden, g=g, scale=3.0)
    residual = randn(tokens, hidden, g=g, scale=10.0)
    weight = (randn(hidden, g=g, scale=0.1, dtype=torch.float32) + 1.0).to(w_dtype)
    want_res = residual + x  # the engine's `x = x + attn`
    want = layers.rms_norm(want_res, weight, EPS)

    res = residual.clone()
    out = nan_like(x)
    normed, res_out = fused.add_rms_norm(x, res, weight, EPS, out=out)
    assert normed is out and res_out is res
    assert same_bits(res, want_res)  # the bf16 add is exact
    assert bool(normed.isfinite().all())
    assert bf16_ulp_diff(normed, want) <= 1


@pytest.mark.parametrize("hidden", [64, 200])
def test_rms_norm_matches_torch(hidden):
    g = gen(hidden)
    # Row-strided input: a slice of a wider tensor (as x[rows] views might be).
    wide = randn(5, hidden + 8, g=g, scale=2.0)
    x = wide[:, :hidden]
    weight = randn(hidden, g=g, scale=0.1) + 1.0
    out = nan_like(x.contiguous())
    got = fused.rms_norm(x, weight, EPS, out=out)
    assert got is out
    assert bool(got.isfinite().all())
    assert bf16_ulp_diff(got, layers.rms_norm(x, weight, EPS)) <= 1
    assert bf16_ulp_diff(fused.rms_norm(x, weight, EPS), layers.rms_norm(x, weight, EPS)) <= 1


def test_residual_add_rounds_as_torch():
    """Ties (round to even), overflow to inf, inf, NaN, subnormals, cancellation."""
    big = torch.finfo(BF).max
    tiny = torch.finfo(BF).smallest_normal
    pairs = [
        (1.0, 2.0**-8),  # tie between 1 and 1 + 2**-7: rounds to even (1)
        (1.0, 3 * 2.0**-8),  # tie: rounds up to even
        (-1.0, -(2.0**-8)),
        (256.0, 1.0),  # below half an ulp: dropped
        (big, big),  # overflow -> inf
        (-big, -big),
        (float("inf"), 1.0),
        (float("inf"), float("-inf")),  # NaN
        (float("nan"), 1.0),
        (tiny, -tiny / 2),  # subnormal result
        (tiny / 4, tiny / 8),
        (3.0, -3.0),  # exact zero
        (1e30, 1e-30),
        (0.1, 0.2),
    ]
    hidden = 32
    x = torch.zeros(len(pairs), hidden, dtype=BF, device=DEVICE)
    residual = torch.zeros_like(x)
    for i, (a, b) in enumerate(pairs):
        residual[i] = torch.tensor(a, dtype=BF)
        x[i] = torch.tensor(b, dtype=BF)
    want = residual + x
    weight = torch.ones(hidden, dtype=BF, device=DEVICE)
    res = residual.clone()
    fused.add_rms_norm(x, res, weight, EPS)
    assert same_bits(res, want)


def test_norm_of_constant_rows():
    """Zero rows (rsqrt of eps) and large rows, and the bf16 rounding of the output."""
    hidden = 128
    x = torch.zeros(3, hidden, dtype=BF, device=DEVICE)
    x[1] = 1000.0
    x[2, ::2] = -0.5
    weight = torch.full((hidden,), 1.5, dtype=BF, device=DEVICE)
    got = fused.rms_norm(x, weight, EPS)
    assert bf16_ulp_diff(got, layers.rms_norm(x, weight, EPS)) <= 1


# ---------------------------------------------------------------------------------------------
# rope_and_write_kv
# ---------------------------------------------------------------------------------------------


def _rope_case(hq, hkv, d, page_size, seed, padded):
    """A ragged step: a few sequences' new tokens (prefill chunks and decodes) at scattered pages,
    plus `padded` graph-padding rows that all write one scratch page (the pool's last)."""
    g = gen(seed)
    num_pages = 9
    scratch = num_pages - 1
    # (first position, tokens, pages of the sequence)
    seqs = [(0, 6, [3, 0]), (13, 1, [5, 1, 7, 2]), (4, 3, [6, 4]), (131_071, 1, [0] * 32767 + [2])]
    positions, pages, offsets = [], [], []
    for start, n, table in seqs:
        for p in range(start, start + n):
            positions.append(p)
            pages.append(table[p // page_size])
            offsets.append(p % page_size)
    assert len(set(zip(pages, offsets, strict=True))) == len(pages), "real rows own distinct slots"
    for i in range(padded):
        positions.append(0)
        pages.append(scratch)
        offsets.append(i % 2)  # padded rows collide on the scratch page, as they may
    t = len(positions)
    qkv = randn(t, (hq + 2 * hkv) * d, g=g, scale=2.0)
    pos = torch.tensor(positions, dtype=torch.int64, device=DEVICE)
    slot_pages = torch.tensor(pages, dtype=torch.int64, device=DEVICE)
    slot_offsets = torch.tensor(offsets, dtype=torch.int64, device=DEVICE)
    k_pool = torch.full((num_pages, hkv, page_size, d), float("nan"), dtype=BF, device=DEVICE)
    v_pool = k_pool.clone()
    return qkv, pos, k_pool, v_pool, slot_pages, slot_offsets, scratch


def _torch_rope_write(qkv, pos, k_pool, v_pool, slot_pages, slot_offsets, hq, hkv, d):
    cos, sin = layers.rope_cos_sin(pos, d, THETA)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    q = layers.apply_rope(q.reshape(-1, hq, d), cos, sin)
    k_pool[slot_pages, :, slot_offsets] = layers.apply_rope(k.reshape(-1, hkv, d), cos, sin)
    v_pool[slot_pages, :, slot_offsets] = v.reshape(-1, hkv, d)
    return q, cos, sin


@pytest.mark.parametrize(
    "hq,hkv,d,index_dtype",
    [
        (4, 2, 16, torch.int32),
        (4, 2, 32, torch.int64),
        (4, 4, 32, torch.int64),
        (6, 2, 16, torch.int64),  # a group of 3 query heads: masked lanes
    ],
)
def test_rope_and_write_kv_table_is_exact(hq, hkv, d, index_dtype):
    page_size = 4
    qkv, pos, k_pool, v_pool, pages, offs, scratch = _rope_case(hq, hkv, d, page_size, d, 3)
    k_want, v_want = k_pool.clone(), v_pool.clone()
    q_want, cos, sin = _torch_rope_write(qkv, pos, k_want, v_want, pages, offs, hq, hkv, d)

    q_out = torch.full((qkv.shape[0], hq, d), float("nan"), dtype=BF, device=DEVICE)
    q = fused.rope_and_write_kv(
        qkv,
        pos.to(index_dtype),
        k_pool,
        v_pool,
        pages.to(index_dtype),
        offs.to(index_dtype),
        hq,
        hkv,
        d,
        THETA,
        cos=cos,
        sin=sin,
        q_out=q_out,
    )
    assert q is q_out
    assert bool(q.isfinite().all())
    assert same_bits(q, q_want)
    # Every real slot bit-exact, untouched slots still NaN; the scratch page (where padded rows
    # collide, so which row lands last is unspecified) is only checked for being written.
    assert same_bits(k_pool[:scratch], k_want[:scratch])
    assert same_bits(v_pool[:scratch], v_want[:scratch])
    written = torch.zeros(k_pool.shape[0], k_pool.shape[2], dtype=torch.bool, device=DEVICE)
    written[pages, offs] = True
    assert bool(k_pool.isnan().all(-1).all(1).eq(~written).all())
    assert bool(v_pool.isnan().all(-1).all(1).eq(~written).all())
    assert bool(k_pool[scratch, :, :2].isfinite().all())


def test_rope_in_kernel_cos_sin():
    hq, hkv, d = 4, 2, 32
    qkv, pos, k_pool, v_pool, pages, offs, scratch = _rope_case(hq, hkv, d, 4, 1, 0)
    k_want, v_want = k_pool.clone(), v_pool.clone()
    q_want, _, _ = _torch_rope_write(qkv, pos, k_want, v_want, pages, offs, hq, hkv, d)
    q = fused.rope_and_write_kv(qkv, pos, k_pool, v_pool, pages, offs, hq, hkv, d, THETA)
    assert bool(q.isfinite().all())
    assert bf16_ulp_diff(q, q_want) <= 1  # cos/sin: libdevice / numpy vs torch's
    assert bf16_ulp_diff(k_pool, k_want) <= 1
    assert same_bits(v_pool, v_want)
    inv = fused.rope_inv_freq(d, THETA, DEVICE)
    assert inv is fused.rope_inv_freq(d, THETA, DEVICE)  # cached: no allocation after warm-up
    want_inv = THETA ** (-torch.arange(0, d, 2, dtype=torch.float32, device=DEVICE) / d)
    assert torch.equal(inv, want_inv)


def test_rope_strided_qkv_and_empty():
    hq, hkv, d = 4, 2, 16
    g = gen(5)
    wide = randn(3, (hq + 2 * hkv) * d + 16, g=g)
    qkv = wide[:, : (hq + 2 * hkv) * d]  # row stride != width
    pos = torch.tensor([2, 9, 40], device=DEVICE)
    pages = torch.tensor([0, 1, 1], device=DEVICE)
    offs = torch.tensor([2, 1, 0], device=DEVICE)
    k_pool = torch.zeros(2, hkv, 4, d, dtype=BF, device=DEVICE)
    v_pool = torch.zeros_like(k_pool)
    k_want, v_want = k_pool.clone(), v_pool.clone()
    q_want, cos, sin = _torch_rope_write(qkv, pos, k_want, v_want, pages, offs, hq, hkv, d)
    q = fused.rope_and_write_kv(
        qkv, pos, k_pool, v_pool, pages, offs, hq, hkv, d, THETA, cos=cos, sin=sin
    )
    assert same_bits(q, q_want) and same_bits(k_pool, k_want) and same_bits(v_pool, v_want)
    empty = fused.rope_and_write_kv(
        qkv[:0], pos[:0], k_pool, v_pool, pages[:0], offs[:0], hq, hkv, d, THETA
    )
    assert tuple(empty.shape) == (0, hq, d)


# ---------------------------------------------------------------------------------------------
# silu_mul
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("inter", [64, 100, 1500])  # 1500: two blocks, the second masked
def test_silu_mul_matches_torch(inter):
    g = gen(inter)
    gate_up = randn(4, 2 * inter, g=g, scale=4.0)
    gate_up[0, :8] = torch.tensor([0.0, -0.0, 90.0, -90.0, 1e-3, -1e-3, 20.0, -20.0])
    gate, up = gate_up.chunk(2, dim=-1)
    want = torch.nn.functional.silu(gate) * up
    out = torch.full((4, inter), float("nan"), dtype=BF, device=DEVICE)
    got = fused.silu_mul(gate_up, out=out)
    assert got is out
    assert bool(got.isfinite().all())
    assert bf16_ulp_diff(got, want) <= 1
    assert bf16_ulp_diff(fused.silu_mul(gate_up), want) <= 1


# ---------------------------------------------------------------------------------------------
# Launcher checks, and the engine's dispatching variants
# ---------------------------------------------------------------------------------------------


def test_launchers_reject_bad_arguments():
    x = torch.zeros(2, 64, dtype=BF, device=DEVICE)
    w = torch.ones(64, dtype=BF, device=DEVICE)
    with pytest.raises(ValueError, match="dtype"):
        fused.rms_norm(x.float(), w, EPS)
    with pytest.raises(ValueError, match="weight"):
        fused.rms_norm(x, w[:32], EPS)
    with pytest.raises(ValueError, match="residual"):
        fused.add_rms_norm(x, x[:1].clone(), w, EPS)
    with pytest.raises(ValueError, match="out"):
        fused.silu_mul(x, out=torch.empty(2, 64, dtype=BF, device=DEVICE))
    qkv = torch.zeros(2, 8 * 16, dtype=BF, device=DEVICE)
    pool = torch.zeros(2, 2, 4, 16, dtype=BF, device=DEVICE)
    idx = torch.zeros(2, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="qkv width"):
        fused.rope_and_write_kv(qkv, idx, pool, pool, idx, idx, 4, 1, 16, THETA)
    with pytest.raises(ValueError, match="slot_pages"):
        fused.rope_and_write_kv(qkv, idx, pool, pool, idx[:1], idx, 4, 2, 16, THETA)
    with pytest.raises(ValueError, match="cos"):
        fused.rope_and_write_kv(qkv, idx, pool, pool, idx, idx, 4, 2, 16, THETA, cos=qkv)


@pytest.mark.parametrize("use_fused", [True, False])
def test_engine_fused_variants(monkeypatch, use_fused):
    monkeypatch.setattr(layers, "USE_FUSED", use_fused)
    g = gen(11)
    hidden, hq, hkv, d, inter = 64, 4, 2, 16, 96
    x = randn(5, hidden, g=g)
    residual = randn(5, hidden, g=g, scale=4.0)
    w = randn(hidden, g=g, scale=0.1) + 1.0
    want_res = residual + x
    normed, res = layers.add_rms_norm(x, residual, w, EPS)
    assert res is residual and same_bits(res, want_res)
    assert bf16_ulp_diff(normed, layers.rms_norm(want_res, w, EPS)) <= 1
    assert bf16_ulp_diff(layers.rms_norm_fused(x, w, EPS), layers.rms_norm(x, w, EPS)) <= 1

    qkv, pos, k_pool, v_pool, pages, offs, scratch = _rope_case(hq, hkv, d, 4, 3, 2)
    k_want, v_want = k_pool.clone(), v_pool.clone()
    q_want, cos, sin = _torch_rope_write(qkv, pos, k_want, v_want, pages, offs, hq, hkv, d)
    q = layers.rope_write_kv(qkv, cos, sin, pos, k_pool, v_pool, pages, offs, hq, hkv, d, THETA)
    assert same_bits(q, q_want)
    assert same_bits(k_pool[:scratch], k_want[:scratch])
    assert same_bits(v_pool[:scratch], v_want[:scratch])

    w_gate_up = randn(2 * inter, hidden, g=g, scale=0.2)
    w_down = randn(hidden, inter, g=g, scale=0.1)
    h = randn(5, hidden, g=g)
    # Same GEMMs; the silu * up in between may differ by 1 ulp, which the down GEMM spreads.
    want = layers.swiglu_mlp(h, w_gate_up, w_down)
    got = layers.swiglu_mlp_fused(h, w_gate_up, w_down)
    torch.testing.assert_close(got, want, atol=0.02, rtol=0.02)
    up_in = torch.nn.functional.linear(h, w_gate_up)
    gate, up = up_in.chunk(2, dim=-1)
    assert bf16_ulp_diff(layers.silu_mul(up_in), torch.nn.functional.silu(gate) * up) <= 1


def test_engine_variants_stay_torch_for_other_dtypes(monkeypatch):
    monkeypatch.setattr(layers, "USE_FUSED", True)
    x = torch.randn(3, 64, dtype=torch.float32, device=DEVICE)
    w = torch.ones(64, dtype=torch.float32, device=DEVICE)
    assert torch.equal(layers.rms_norm_fused(x, w, EPS), layers.rms_norm(x, w, EPS))
