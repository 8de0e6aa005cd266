"""Paged chunked-prefill kernel vs the float32 torch reference.

On CPU (CI) the kernel runs under Triton's interpreter with small shapes and small tiles; on a
GPU the same tests use head_dim 128, the default tiles and longer contexts. Outputs (and the
log-sum-exp) are poisoned with NaN before every call, so an unwritten element fails.
"""

import numpy as np
import pytest
import torch
import triton
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.paged_decode import SUPPORTED_PAGE_SIZES
from kernels.paged_prefill import (
    PREFILL_LAUNCH_CONFIGS,
    paged_prefill_attention,
    plan_prefill,
)
from kernels.reference import make_prefill_batch, paged_prefill_reference, prefill_flops

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
HEAD_DIM = 128 if ON_GPU else 32
# Small tiles on CPU so that short chunks still span several query tiles and key tiles.
CFG = {} if ON_GPU else {"block_m": 32, "block_n": 16, "num_warps": 4, "num_stages": 1}
SCALE = 40 if ON_GPU else 1  # GPU: longer contexts and chunks
TOL = 1e-2


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def check(
    ctx,
    new,
    num_kv_heads=2,
    group=4,
    page_size=16,
    dtype=torch.bfloat16,
    seed=0,
    tokens_per_split=None,
    causal=True,
    sm_scale=None,
    **cfg,
):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    q, kv, cu = make_prefill_batch(
        ctx, new, num_kv_heads, group, HEAD_DIM, page_size, dtype, DEVICE, g, spare_pages=2
    )
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:2], float("nan"), device=DEVICE)
    res = paged_prefill_attention(
        q,
        kv.k_cache,
        kv.v_cache,
        kv.block_tables,
        kv.seq_lens,
        cu,
        out=out,
        lse_out=lse,
        causal=causal,
        tokens_per_split=tokens_per_split,
        sm_scale=sm_scale,
        **{**CFG, **cfg},
    )
    assert res is out
    assert bool(torch.isfinite(out).all()), "some output element was not written"
    ref, ref_lse = paged_prefill_reference(
        q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu, sm_scale, causal=causal
    )
    err = rel_err(out, ref)
    assert err < TOL, f"rel err {err:.2e}"
    assert float((lse - ref_lse).abs().max()) < 1e-3
    return err


# Ragged chunk lengths across page boundaries (+-1), context 0, a chunk of 1.
RAGGED_CTX = [0, 15, 16, 17, 0, 33]
RAGGED_NEW = [1, 17, 16, 15, 40, 1]


@pytest.mark.parametrize("page_size", SUPPORTED_PAGE_SIZES)
def test_page_sizes(page_size):
    check([c * SCALE for c in RAGGED_CTX], RAGGED_NEW, page_size=page_size)


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("split", [None, 16])
def test_gqa_ratios_and_key_splits(group, split):
    check(RAGGED_CTX, RAGGED_NEW, group=group, tokens_per_split=split, seed=group)


@pytest.mark.parametrize("group", [1, 6, 8])
@pytest.mark.parametrize("rows,splits", [(2, 16), (4, 2), (16, 4)])
def test_split_combine_merges_several_splits_a_step(group, rows, splits):
    # The combine with `splits` partials per load (session 10): split counts under, at and over
    # a multiple of it (ragged contexts, 16-token splits), padded rows of a non-power-of-two
    # group, lse too; the same answer as the reference and as the one-split-a-step merge.
    args = (RAGGED_CTX, RAGGED_NEW)
    kw = dict(group=group, tokens_per_split=16, seed=group)
    err = check(*args, combine_rows=rows, combine_splits=splits, **kw)
    assert abs(err - check(*args, **kw)) < 1e-3


def test_split_combine_shape_follows_the_split_count(monkeypatch):
    # COMBINE_BY_SPLITS (session 11): the largest key <= the plan's most splits of a tile wins;
    # below every key, the (COMBINE_ROWS, COMBINE_SPLITS) default.
    import kernels.paged_prefill as pp

    monkeypatch.setattr(pp, "COMBINE_BY_SPLITS", {8: (4, 8), 16: (2, 16)})
    shapes = {}
    for ctx, tps in ((100, 16), (200, 16), (400, 16), (40, 64)):
        plan = plan_prefill([3], [ctx + 3], 2, 4, tokens_per_split=tps, block_n=16)
        shapes[plan.max_splits] = pp.combine_shape(plan)
    assert shapes == {7: (16, 1), 13: (4, 8), 26: (2, 16), 1: (16, 1)}


def test_split_combine_default_shapes_by_count():
    # The H200 sweep's choice (session 11): 16 x 1 under 12 splits, 2 x 16 from 12, 1 x 32 from
    # 32; on the interpreter both wide shapes (one and two loads of 32) merge as 16 x 1 does.
    import kernels.paged_prefill as pp

    want = {7: (16, 1), 11: (16, 1), 12: (2, 16), 31: (2, 16), 32: (1, 32), 40: (1, 32)}
    for splits, shape in want.items():
        plan = plan_prefill([3], [16 * splits], 2, 4, tokens_per_split=16, block_n=16)
        assert plan.max_splits == splits and pp.combine_shape(plan) == shape
    for ctx in ([200, 40], [600, 9]):  # 13 and 38 splits of the longest tile
        kw = dict(tokens_per_split=16, seed=len(ctx))
        err = check(ctx, [3, 5], **kw)
        assert abs(err - check(ctx, [3, 5], combine_rows=16, combine_splits=1, **kw)) < 1e-3


@pytest.mark.parametrize("pdl", [False, True])
def test_split_combine_by_count_and_pdl_answer_the_same(pdl, monkeypatch):
    # The combine shape chosen by count and the programmatic dependent launch (a plain launch
    # where the GPU has none, e.g. the interpreter) merge as the reference does.
    import kernels.paged_prefill as pp

    monkeypatch.setattr(pp, "COMBINE_BY_SPLITS", {2: (2, 16)})
    kw = dict(tokens_per_split=16, seed=3)
    err = check(RAGGED_CTX, RAGGED_NEW, pdl_combine=pdl, **kw)
    monkeypatch.setattr(pp, "COMBINE_BY_SPLITS", {})
    assert abs(err - check(RAGGED_CTX, RAGGED_NEW, **kw)) < 1e-3


def test_split_combine_knobs_are_powers_of_two():
    with pytest.raises(ValueError, match="combine_splits"):
        check([16], [4], tokens_per_split=16, combine_splits=3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dtypes(dtype):
    check([7 * SCALE, 0], [30, 23], num_kv_heads=1, group=8, dtype=dtype)


def test_non_power_of_two_group():
    # 6 query heads per KV head: padded to 8 rows per token, the 2 padding rows never stored.
    check([20, 0], [9, 12], num_kv_heads=2, group=6)


def test_context_only_decode_like_and_long_context():
    # One new token over a context (decode through the prefill path) and a long context split.
    check([90 * SCALE, 64 * SCALE], [1, 3], group=8, tokens_per_split=32 * SCALE)


@pytest.mark.parametrize("sm_scale", [None, 0.3])
def test_one_token_chunks_take_the_decode_kernel(sm_scale, monkeypatch):
    # Every request brings one new token: the plan's class is "decode" and the launch is the
    # decode kernel's (with its lse), the same function as the prefill reference.
    import kernels.paged_prefill as pre
    from kernels.paged_prefill import plan_prefill, prepare_prefill

    ctx, new = [0, 15, 16, 40 * SCALE], [1, 1, 1, 1]
    g = torch.Generator(device=DEVICE).manual_seed(5)
    q, kv, cu = make_prefill_batch(ctx, new, 2, 8, HEAD_DIM, 16, torch.bfloat16, DEVICE, g, 2)
    lens = [c + n for c, n in zip(ctx, new, strict=True)]
    # Only from DECODE_ROUTE_MIN_KEYS keys x KV heads on (short contexts: the prefill kernel).
    assert plan_prefill([1], [9], 2, 8).work_class == "split"  # a padded tile (pad_min_rows)
    assert plan_prefill([1], [pre.DECODE_ROUTE_MIN_KEYS // 2], 2, 8).work_class == "decode"
    monkeypatch.setattr(pre, "DECODE_ROUTE_MIN_KEYS", 1)
    plan = plan_prefill(new, lens, 2, 8, device=DEVICE)
    assert plan.work_class == "decode" and plan.max_seq_len == max(lens)
    assert plan_prefill([1, 2], [9, 9], 2, 8).work_class != "decode"
    assert plan_prefill(new, lens, 2, 8, causal=False).work_class != "decode"
    assert plan_prefill(new, lens, 2, 8, launch={"block_m": 128}).work_class == "decode"
    assert plan_prefill(new, lens, 2, 8, launch={"num_warps": 4}).work_class != "decode"
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:2], float("nan"), device=DEVICE)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu)
    launch = prepare_prefill(*args, out=out, lse_out=lse, plan=plan, sm_scale=sm_scale)
    launch(kv.k_cache, kv.v_cache)
    assert bool(torch.isfinite(out).all()) and bool(torch.isfinite(lse).all())
    ref, ref_lse = paged_prefill_reference(*args, sm_scale)
    assert rel_err(out, ref) < TOL
    assert float((lse - ref_lse).abs().max()) < 1e-3


def test_non_causal_attends_to_every_key():
    check([10, 40], [6, 5], causal=False, tokens_per_split=16)


def test_requests_without_new_tokens_are_skipped():
    check([12, 50, 3], [4, 0, 9], group=4)


def test_fp32_out_and_no_lse():
    g = torch.Generator(device=DEVICE).manual_seed(5)
    q, kv, cu = make_prefill_batch([20], [11], 2, 4, HEAD_DIM, 8, torch.bfloat16, DEVICE, g)
    out = torch.full(q.shape, float("nan"), device=DEVICE)
    paged_prefill_attention(
        q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu, out=out, **CFG
    )
    ref, _ = paged_prefill_reference(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu)
    assert rel_err(out, ref) < TOL


def test_reusing_a_plan_gives_identical_bits():
    g = torch.Generator(device=DEVICE).manual_seed(9)
    q, kv, cu = make_prefill_batch([30, 0], [20, 9], 2, 4, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu)
    a = paged_prefill_attention(*args, **CFG)
    plan = plan_prefill(
        [20, 9],
        [50, 9],
        2,
        4,
        device=DEVICE,
        block_m=CFG.get("block_m", 128),
        block_n=CFG.get("block_n", 64),
    )
    b = paged_prefill_attention(*args, plan=plan, check_bounds=False, **CFG)
    assert torch.equal(a, b)


def test_plan_splits_cut_only_keys_every_row_sees():
    # 16 new tokens over 1000 cached, forced 128-token splits: every split of a tile starts at
    # or before the tile's first row position (ctx + q_start), so no row is left without keys.
    plan = plan_prefill([16], [1016], 1, 8, block_m=128, block_n=64, tokens_per_split=128)
    work = plan.work.numpy()
    assert plan.block_q == 16 and plan.n_slots == len(work) == 8
    assert sorted(work[:, 2].tolist()) == list(range(0, 1024, 128))
    assert int(work[:, 3].max()) == 1016 and all(work[:, 2] <= 1000)
    # The heuristic splits only when the tiles cannot fill the GPU: an 8K chunk is not split
    # (and runs the wide tiles: 256 rows, 32 tokens of 8 heads).
    big = plan_prefill([8192], [8192], 8, 8, num_sms=132)
    wide = PREFILL_LAUNCH_CONFIGS["tiles_wide"]["block_m"] > 128
    assert big.n_slots == 0 and big.work.shape[0] == 8192 // (32 if wide else 16)
    small = plan_prefill([16], [32768], 8, 8, num_sms=132)
    assert small.n_slots > 0 and small.work.shape[0] * 8 >= 100  # ~1 program per SM
    # Longest work first.
    lengths = big.work[:, 3] - big.work[:, 2]
    assert bool((lengths[:-1] >= lengths[1:]).all())


def test_padded_split_tiles_take_the_gluon_tile():
    # pad_min_rows (session 12): here 32, a split tile of 32 or 64 rows (3-8 tokens x GROUP 8)
    # becomes one 128-row tile (Gluon loop 2's only shape), class "split", split as 16 tokens;
    # under pad_min_rows, without a Gluon loop, unsplit, or at other block_m it stays as it was.
    kw = dict(num_sms=132, pad_min_rows=32)
    sixteen = plan_prefill([16], [32784], 8, 8, num_sms=132)
    for new in (4, 8, 15):
        plan = plan_prefill([new], [32768 + new], 8, 8, **kw)
        assert (plan.work_class, plan.block_q, plan.block_m) == ("split", 16, 128)
        assert plan.rows_used == new * 8 and plan.max_new == new
        assert plan.tokens_per_split == sixteen.tokens_per_split
        assert plan.work.shape == sixteen.work.shape
    assert plan_prefill([4], [32772], 8, 8, num_sms=132).block_q == 16  # the default: 16 rows
    assert plan_prefill([4], [32772], 8, 8, num_sms=132, pad_min_rows=0).block_q == 4  # off
    two = plan_prefill([2], [32770], 8, 8, **kw)
    assert (two.work_class, two.block_q) == ("split_small", 2)  # 16 rows < 32
    assert plan_prefill([4], [32772], 8, 8, launch={"gluon": 0}, **kw).block_q == 4
    assert plan_prefill([4] * 200, [4096] * 200, 8, 8, **kw).block_q == 4  # tiles fill the GPU
    assert plan_prefill([4], [32772], 8, 8, block_m=64, **kw).block_q == 4
    # GROUP 4: 5-16 tokens (32 or 64 rows) are padded to 32 tokens; a chunk of 4 (16 rows) is not.
    assert plan_prefill([9], [8201], 8, 4, **kw).block_q == 32
    assert plan_prefill([4], [8196], 8, 4, **kw).block_q == 4
    assert plan_prefill([16], [32784], 8, 8, pad_min_rows=32, num_sms=132).rows_used == 128
    # A given programs_per_sm holds for padded tiles too (2 per SM: 33 splits, as 16 tokens).
    two_per_sm = dict(num_sms=132, programs_per_sm=2)
    assert plan_prefill([4], [32772], 8, 8, **two_per_sm).max_splits == 33
    assert plan_prefill([16], [32784], 8, 8, **two_per_sm).max_splits == 33
    assert sixteen.max_splits == 16


@pytest.mark.parametrize("skip_idle", [0, 1] if ON_GPU else [0])  # Gluon's WS_SKIP_IDLE
@pytest.mark.parametrize("group", [4, 6, 8])
def test_padded_split_tiles_against_the_reference(monkeypatch, group, skip_idle):
    # Chunks of 1-15 tokens over contexts that split, in 128-row tiles padded from 16-64 rows:
    # the Triton kernel under the interpreter, Gluon loop 2 on a Hopper GPU (both consumers,
    # one, or one consumer's rows only partly queries); output and lse NaN-poisoned; the
    # split combine runs programs only for the rows a tile uses.
    from kernels import gluon_prefill
    from kernels.paged_prefill import combine_shape, prepare_prefill

    monkeypatch.setattr(gluon_prefill, "WS_SKIP_IDLE", skip_idle)
    ctx, new = [40 * SCALE, 100 * SCALE, 7, 64 * SCALE], [4, 9, 3, 15]
    split = None if ON_GPU else 16  # CPU: contexts too short for the planner to split
    kw = dict(group=group, block_m=128, pad_min_rows=16, tokens_per_split=split, seed=group)
    check(ctx, new, **kw)
    check(ctx[:1], new[:1], **kw)
    check(ctx[1:2], [2], **kw)
    g = torch.Generator(device=DEVICE).manual_seed(0)
    q, kv, cu = make_prefill_batch(ctx, new, 2, group, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu)
    prep = prepare_prefill(
        *args, block_m=128, pad_min_rows=16, tokens_per_split=split, block_n=CFG.get("block_n")
    )
    plan = prep.plan
    assert plan is not None and plan.block_m == 128 and plan.n_slots > 0
    assert plan.rows_used == 15 * triton.next_power_of_2(group)
    block_r = min(combine_shape(plan)[0], 64)
    assert prep.launches[1].grid[2] == -(-plan.rows_used // block_r)
    if _gluon_runs():
        assert prep.launches[0].kernel is gluon_prefill.WS_KERNEL


@pytest.mark.parametrize("sm_scale", [None, 1.5])
@pytest.mark.parametrize("on", [True, False])
@pytest.mark.parametrize("variant", ["lazy_rescale", "warp_specialize"])
def test_loop_variants(variant, on, sm_scale):
    # lazy_rescale skips the acc/l rescale unless a row max grew by > 2^8; a large sm_scale makes
    # maxima jump across tiles, so both of its branches run. warp_specialize only changes the
    # compiled schedule of the unmasked loop (the interpreter runs it as a plain loop).
    for split in (None, 16):
        try:
            check(RAGGED_CTX, RAGGED_NEW, group=4, tokens_per_split=split, sm_scale=sm_scale,
                  **{variant: on})  # fmt: skip
        except AssertionError:
            raise
        except Exception as exc:  # a Triton whose compiler lacks the variant: not a wrong answer
            if ON_GPU and variant == "warp_specialize" and on:
                pytest.skip(f"warp_specialize does not compile here: {type(exc).__name__}")
            raise


@pytest.mark.parametrize("block_n", [16, 32])
@pytest.mark.parametrize("page_size", [8, 16, 64])
def test_tiles_within_and_across_pages(block_n, page_size):
    # block_n < page: one table entry per tile (contiguous rows); >= page: one per page run.
    check([c * SCALE for c in (0, 33, 70)], [5, 19, 40], page_size=page_size, block_n=block_n)


def test_plan_carries_its_class_launch_config():
    plans = {
        "tiles": plan_prefill([400], [4096], 8, 8, num_sms=132),  # 13 wide tiles: < 1 per SM
        "split": plan_prefill([16], [32768], 8, 8, num_sms=132),
        "split_small": plan_prefill([2], [32768], 8, 8, num_sms=132, pad_min_rows=0),
        "decode": plan_prefill([1, 1], [32768, 9], 8, 8, num_sms=132),  # >= 32K keys x heads
    }
    if PREFILL_LAUNCH_CONFIGS["tiles_wide"]["block_m"] > 128:
        plans["tiles_wide"] = plan_prefill([4096], [4096], 8, 8, num_sms=132)
    for cls, plan in plans.items():
        assert plan.work_class == cls
        launch = plan.launch_config()
        assert launch == {k: PREFILL_LAUNCH_CONFIGS[cls][k] for k in launch}
    forced = plan_prefill([16], [32768], 8, 8, num_sms=132, block_n=64, launch={"num_warps": 4})
    assert forced.block_n == 64 and forced.num_warps == 4
    assert forced.tokens_per_split % 64 == 0
    with pytest.raises(ValueError, match="unknown launch keys"):
        plan_prefill([16], [100], 1, 8, launch={"bogus": 1})


def test_configs_recorded_with_a_retired_option_at_its_off_value_still_load(monkeypatch):
    from kernels.paged_prefill import set_prefill_launch_configs

    split = dict(PREFILL_LAUNCH_CONFIGS["split"])
    monkeypatch.setitem(PREFILL_LAUNCH_CONFIGS, "split", split)
    set_prefill_launch_configs({"split": {"num_warps": 4, "poly_exp2": 0}})  # session 6's files
    assert PREFILL_LAUNCH_CONFIGS["split"] == {**split, "num_warps": 4}
    with pytest.raises(ValueError, match="unknown launch keys"):
        set_prefill_launch_configs({"split": {"poly_exp2": 2}})  # on: no longer exists


def test_wide_tiles_where_they_fill_the_gpu(monkeypatch):
    # "tiles_wide": the causal chunks whose wider tiles still give >= 1 program per SM. Small
    # tiles on CPU (the class's block_m is its knob), a 2-SM "GPU" so that the class is chosen.
    wide = {"block_m": 64, "block_n": 16, "num_warps": 4, "num_stages": 1} if not ON_GPU else {}
    monkeypatch.setitem(
        PREFILL_LAUNCH_CONFIGS,
        "tiles_wide",
        {**PREFILL_LAUNCH_CONFIGS["tiles_wide"], "block_m": 256, **wide},
    )
    ctx, new = [c * SCALE for c in (0, 33, 70)], [40, 19, 5]
    lens = [c + n for c, n in zip(ctx, new, strict=True)]
    sms = 2 if not ON_GPU else 3
    plan = plan_prefill(new, lens, 2, 4, block_m=32 if not ON_GPU else 128, num_sms=sms,
                        device=DEVICE)  # fmt: skip
    assert plan.work_class == "tiles_wide" and plan.n_slots == 0
    assert plan.block_m == PREFILL_LAUNCH_CONFIGS["tiles_wide"]["block_m"]
    # Not where the wide tiles leave SMs idle, nor for non-causal passes, nor a forced block_m.
    assert plan_prefill(new, lens, 2, 4, num_sms=132).work_class != "tiles_wide"
    assert plan_prefill(new, lens, 2, 4, num_sms=sms, causal=False).work_class != "tiles_wide"
    forced = plan_prefill(new, lens, 2, 4, num_sms=sms, launch={"block_m": 128})
    assert forced.work_class != "tiles_wide"

    g = torch.Generator(device=DEVICE).manual_seed(11)
    q, kv, cu = make_prefill_batch(ctx, new, 2, 4, HEAD_DIM, 16, torch.bfloat16, DEVICE, g, 2)
    out = torch.full_like(q, float("nan"))
    paged_prefill_attention(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu,
                            out=out, plan=plan)  # fmt: skip
    assert bool(torch.isfinite(out).all())
    ref, _ = paged_prefill_reference(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu)
    assert rel_err(out, ref) < TOL


@pytest.mark.parametrize("new", [1, 16, 64])
def test_split_count_fills_one_wave(new):
    # Few tokens over 32K: splits are lengthened until every program runs in one wave.
    plan = plan_prefill([new], [32768 + new], 8, 8, num_sms=132)
    programs = plan.work.shape[0] * 8
    per_sm = 1 if plan.block_m >= 64 else 2
    assert plan.n_slots > 0 and programs <= per_sm * 132
    assert programs > per_sm * 132 * 0.75, programs  # and still fill most of it


def test_block_q_follows_the_longest_chunk():
    off = dict(pad_min_rows=0)  # (split tiles are padded to 128 rows by default)
    assert plan_prefill([1], [100], 1, 8, **off).block_q == 2  # 16 rows: 1 token x 8 heads
    assert plan_prefill([3, 1], [100, 9], 1, 4, **off).block_q == 4
    assert plan_prefill([3, 1], [100, 9], 1, 4).block_q == 32
    # 128 rows (the wide class off: a block_m in the launch config keeps the plan's)
    assert plan_prefill([5000], [5000], 1, 8, launch={"block_m": 128}).block_q == 16
    assert plan_prefill([5000], [5000], 1, 1, launch={"block_m": 128}).block_q == 128
    # 157 wide tiles of 32 tokens x 8 heads fill 132 SMs: the planner takes them
    wide = PREFILL_LAUNCH_CONFIGS["tiles_wide"]["block_m"] // 8
    assert plan_prefill([5000], [5000], 1, 8, num_sms=132).block_q == max(16, wide)


def test_prefill_flops_are_causal():
    # n new over c cached: n*c full pairs plus the n(n+1)/2 triangle.
    assert prefill_flops([0], [4], 1, 1) == 4 * 10
    assert prefill_flops([3, 0], [2, 1], 2, 8) == 4 * 8 * 2 * (2 * 3 + 3 + 1)
    assert np.isclose(prefill_flops([0], [8192], 64, 128), 4 * 128 * 64 * 8192 * 8193 / 2)


@settings(
    max_examples=6 if not ON_GPU else 20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    chunks=st.lists(st.tuples(st.integers(0, 70), st.integers(1, 40)), min_size=1, max_size=3),
    page_size=st.sampled_from(SUPPORTED_PAGE_SIZES),
    group=st.sampled_from([1, 2, 4, 8]),
    num_kv_heads=st.integers(1, 2),
    split=st.sampled_from([None, 16, 48]),
    dtype=st.sampled_from([torch.bfloat16, torch.float16]),
    seed=st.integers(0, 2**16),
)
def test_random_shapes(chunks, page_size, group, num_kv_heads, split, dtype, seed):
    ctx = [c * SCALE for c, _ in chunks]
    new = [n for _, n in chunks]
    check(ctx, new, num_kv_heads, group, page_size, dtype, seed, split)


def test_key_splits_may_take_several_waves():
    # 271 new tokens over 17,306 at 32 q / 8 KV heads: 9 tiles x 8 heads = 72 programs. In one
    # wave they cannot split (2 each = 144 > 132), so one wave leaves 60 SMs idle behind 17K-key
    # programs; with 128-key tiles 5 splits each (360 programs, 3 waves of ~3.5K keys) cost 0.64
    # of that. With the split class's 64-key tiles (session 7) a program's fixed cost is half as
    # many keys: 11 splits of 1,600 (792 programs, 6 waves).
    plan = plan_prefill([271], [271 + 17306], 8, 4, num_sms=132, launch={"block_n": 128})
    programs = plan.work.shape[0] * 8
    assert plan.work_class == "split" and programs == 360 and plan.tokens_per_split == 3584
    assert plan.n_slots == plan.work.shape[0]  # every tile split
    plan = plan_prefill([271], [271 + 17306], 8, 4, num_sms=132)
    assert plan.block_n == PREFILL_LAUNCH_CONFIGS["split"]["block_n"]
    if plan.block_n == 64:
        assert plan.work.shape[0] * 8 == 792 and plan.tokens_per_split == 1600
    # Where one wave fills the GPU, it stays one wave (the fixed cost per wave decides).
    for new, ctx, kvh, group in ((16, 32768, 8, 8), (64, 32768, 8, 8), (256, 16384, 8, 4)):
        one = plan_prefill([new], [new + ctx], kvh, group, num_sms=132)
        assert one.work.shape[0] * kvh <= 132, (new, ctx)


def _gluon_runs() -> bool:
    from kernels import gluon_prefill

    return gluon_prefill.available(DEVICE)


def test_gluon_flag_falls_back_where_gluon_cannot_run():
    # kernels/ imports without Gluon; on the CPU (interpreter) or a non-Hopper GPU the flag keeps
    # the Triton kernel, so the answer is the reference's either way.
    from kernels import gluon_prefill

    assert not gluon_prefill.available("cpu")
    if not _gluon_runs():
        check(RAGGED_CTX, RAGGED_NEW, group=4, gluon=True)


@pytest.mark.skipif(not ON_GPU, reason="the Gluon loops run on Hopper GPUs only")
@pytest.mark.parametrize("variant", [1, 2, 3])
@pytest.mark.parametrize("block_n", [64, 128])
@pytest.mark.parametrize("split", [None, 256])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_gluon_tiles(group, split, block_n, variant):
    # 128-row tiles (the Gluon loops' shape) over ragged chunks and contexts, page edges,
    # context 0, causal diagonals inside and across key tiles, split partials; variant 2 is
    # warp-specialised (two consumer warpgroups of 64 rows, a copy partition, mbarriers),
    # variant 3 its persistent form (loop 2 where two Q buffers leave too few stages: 128 keys).
    if not _gluon_runs():
        pytest.skip("Gluon / sm_90 not available")
    if variant == 1 and (group, block_n) != (8, 128):
        pytest.skip("variant 1: one shape per split mode (its full grid ran in session 7 call 1)")
    from kernels import gluon_prefill
    from kernels.paged_prefill import prepare_prefill

    ctx = [0, 15 * SCALE, 16 * SCALE + 1, 17, 0, 33 * SCALE]
    new = [1, 300, 160, 1000, 77, 129]
    check(ctx, new, group=group, tokens_per_split=split, block_n=block_n, gluon=variant, seed=group)
    g = torch.Generator(device=DEVICE).manual_seed(0)
    q, kv, cu = make_prefill_batch(ctx, new, 2, group, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    prep = prepare_prefill(
        q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu, block_n=block_n, gluon=variant
    )
    want = {1: gluon_prefill.KERNEL, 2: gluon_prefill.WS_KERNEL, 3: gluon_prefill.PS_KERNEL}
    if variant == 3 and block_n == 128:
        variant = 2
    assert prep.launches[0].kernel is want[variant]


@pytest.mark.skipif(not ON_GPU, reason="the Gluon loops run on Hopper GPUs only")
@pytest.mark.parametrize("programs", [1, 3, 7, None])
@pytest.mark.parametrize("split", [None, 512])
def test_gluon_persistent_units(monkeypatch, programs, split):
    # Persistent loop 2: each program takes many (work item, KV head) units in a row (a few
    # programs: the K/V stage ring, its phases and the two Q buffers wrap many times; units of
    # one key tile next to long ones; split partials), against the reference.
    if not _gluon_runs():
        pytest.skip("Gluon / sm_90 not available")
    from kernels import gluon_prefill

    monkeypatch.setattr(gluon_prefill, "PS_MAX_PROGRAMS", programs)
    ctx = [0, 3000, 17, 0, 64 * SCALE]
    new = [2048, 700, 900, 1, 33]
    check(ctx, new, num_kv_heads=4, group=8, tokens_per_split=split, block_n=64, gluon=3,
          seed=programs or 0)  # fmt: skip
    for lag, stages, order in ((1, 4, 1), (2, 5, 0), (2, 5, 1)):
        monkeypatch.setattr(gluon_prefill, "PS_READY_LAG", lag)
        monkeypatch.setattr(gluon_prefill, "PS_MAX_STAGES", stages)
        monkeypatch.setattr(gluon_prefill, "PS_ORDER", order)
        check([5, 0], [300, 129], num_kv_heads=2, group=8, block_n=64, gluon=3, seed=lag)
        check(ctx, new, num_kv_heads=4, group=8, tokens_per_split=split, block_n=64, gluon=3,
              seed=lag)  # fmt: skip


@pytest.mark.skipif(not ON_GPU, reason="the Gluon loops run on Hopper GPUs only")
@pytest.mark.parametrize(
    "stages, lag, pingpong", [(5, 2, 0), (6, 3, 0), (6, 2, 0), (4, 1, 1), (5, 2, 1)]
)
@pytest.mark.parametrize("split", [None, 256])
def test_gluon_loop2_stages_and_lag(monkeypatch, stages, lag, pingpong, split):
    # Loop 2 with more K/V stages and LAG + 1 tiles' copies in flight (WS_MAX_STAGES,
    # WS_READY_LAG), the consumers taking turns (WS_PINGPONG), 64-key tiles, ragged chunks,
    # against the reference.
    if not _gluon_runs():
        pytest.skip("Gluon / sm_90 not available")
    from kernels import gluon_prefill

    monkeypatch.setattr(gluon_prefill, "WS_MAX_STAGES", stages)
    monkeypatch.setattr(gluon_prefill, "WS_READY_LAG", lag)
    monkeypatch.setattr(gluon_prefill, "WS_PINGPONG", pingpong)
    ctx = [0, 15 * SCALE, 16 * SCALE + 1, 17, 0, 33 * SCALE]
    new = [1, 300, 160, 1000, 77, 129]
    check(ctx, new, group=8, tokens_per_split=split, block_n=64, gluon=2, seed=stages + lag)


@pytest.mark.skipif(not ON_GPU, reason="the Gluon loops run on Hopper GPUs only")
@pytest.mark.parametrize("variant", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gluon_dtypes_scale_and_pages(dtype, variant):
    if not _gluon_runs():
        pytest.skip("Gluon / sm_90 not available")
    check([7 * SCALE, 0, 4096], [300, 230, 2048], num_kv_heads=1, group=8, dtype=dtype,
          gluon=variant)  # fmt: skip
    check([7 * SCALE, 0], [300, 230], group=8, sm_scale=1.5, gluon=variant)
    for page_size in (1, 8, 64):
        check([5 * SCALE, 3], [200, 150], group=8, page_size=page_size, gluon=variant)


def test_gluon_choice(monkeypatch):
    # Which Gluon loop (and its stages) a launch gets, where Gluon could run: loop 2 at 3 stages
    # for 128-key tiles and 4 for 64 (next to a 128 x 128 Q in 227 KB); the Triton kernel for
    # untested head dims, tiles that are not 128 rows, fp32, or variant 0.
    from kernels import gluon_prefill as gp

    if not gp.HAVE_GLUON:
        pytest.skip("this Triton has no Gluon")
    monkeypatch.setattr(gp, "available", lambda device: True)
    bf16 = torch.bfloat16
    kernel, consts = gp.choose(2, "cuda", 128, 128, 64, bf16)
    assert kernel is gp.WS_KERNEL and consts["NS"] == 4 and consts["num_warps"] == 4
    assert gp.choose(2, "cuda", 128, 128, 128, bf16)[1]["NS"] == 3
    assert gp.choose(1, "cuda", 128, 128, 128, torch.float16)[0] is gp.KERNEL
    for args in ((0, 128, 128, 64, bf16), (2, 64, 128, 64, bf16), (2, 128, 64, 64, bf16),
                 (2, 128, 128, 64, torch.float32), (2, 128, 128, 32, bf16)):  # fmt: skip
        assert gp.choose(args[0], "cuda", *args[1:]) is None, args
    assert gp.ws_stages(256, 128) < 3  # loop 2 would not fit: the Triton kernel
    # Persistent loop 2: 4 stages next to two Q tiles at 64-key tiles; loop 2 at 128.
    kernel, consts = gp.choose(3, "cuda", 128, 128, 64, bf16)
    assert kernel is gp.PS_KERNEL and consts["NS"] == 4 and consts["LAG"] == 1
    assert gp.choose(3, "cuda", 128, 128, 128, bf16)[0] is gp.WS_KERNEL
    # The ready lag stays <= NS - 3; 6 stages fit next to one Q tile at 64-key tiles.
    monkeypatch.setattr(gp, "WS_MAX_STAGES", 8)
    monkeypatch.setattr(gp, "WS_READY_LAG", 5)
    consts = gp.choose(2, "cuda", 128, 128, 64, bf16)[1]
    assert consts["NS"] == 6 and consts["LAG"] == 3
    # Loop 2's idle-consumer shortcut is a constant of its launch (session 12).
    for skip in (0, 1):
        monkeypatch.setattr(gp, "WS_SKIP_IDLE", skip)
        assert gp.choose(2, "cuda", 128, 128, 64, bf16)[1]["SKIP_IDLE"] == skip
