"""Paged decode kernel vs the float32 torch reference.

On CPU (CI) the kernels run under Triton's interpreter with small shapes; on a GPU the same tests
use the article's head_dim (128) and longer, ragged sequences. Outputs are poisoned (NaN) before
every call, so an unwritten element fails the finiteness check.
"""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.paged_decode import (
    SUPPORTED_PAGE_SIZES,
    choose_split,
    paged_decode_attention,
)
from kernels.reference import make_paged_kv, paged_decode_reference

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
HEAD_DIM = 128 if ON_GPU else 32
# Ragged lengths: 1 token, page boundaries +-1, and one long sequence.
LENS = [1, 15, 16, 17, 100, 3000, 4097] if ON_GPU else [1, 15, 16, 17, 70]
BLOCK_N = 64 if ON_GPU else 16  # small tiles on CPU so short sequences still span many tiles
TOL = 1e-2


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def check(
    lens,
    num_kv_heads,
    group,
    page_size,
    dtype=torch.bfloat16,
    grouped=True,
    num_splits=None,
    seed=0,
    block_n=BLOCK_N,
    **options,
):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    kv = make_paged_kv(lens, num_kv_heads, HEAD_DIM, page_size, dtype, DEVICE, g, spare_pages=3)
    q = torch.randn(len(lens), num_kv_heads * group, HEAD_DIM, generator=g, device=DEVICE)
    q = q.to(dtype)
    out = torch.full_like(q, float("nan"))
    res = paged_decode_attention(
        q,
        kv.k_cache,
        kv.v_cache,
        kv.block_tables,
        kv.seq_lens,
        out=out,
        grouped=grouped,
        num_splits=num_splits,
        block_n=block_n,
        **options,
    )
    assert res is out
    assert bool(torch.isfinite(out).all()), "some output element was not written"
    ref = paged_decode_reference(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    err = rel_err(out, ref)
    assert err < TOL, f"rel err {err:.2e}"
    return err


@pytest.mark.parametrize("page_size", SUPPORTED_PAGE_SIZES)
@pytest.mark.parametrize("num_splits", [1, 3])
def test_page_sizes(page_size, num_splits):
    check(LENS, num_kv_heads=2, group=4, page_size=page_size, num_splits=num_splits)


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("num_splits", [1, 4])
def test_gqa_ratios_and_variants(group, grouped, num_splits):
    check(
        LENS,
        num_kv_heads=2,
        group=group,
        page_size=16,
        grouped=grouped,
        num_splits=num_splits,
        seed=group,
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dtypes_with_automatic_split(dtype):
    check(LENS, num_kv_heads=1, group=8, page_size=16, dtype=dtype, num_splits=None)


def test_many_splits_leave_short_sequences_unsplit():
    # 20 splits over the longest sequence: short ones have empty splits that write nothing and
    # that the combine pass must not read.
    check([3, 200 if not ON_GPU else 20000], num_kv_heads=2, group=4, page_size=8, num_splits=20)


@pytest.mark.parametrize("group", [1, 8])
@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("num_splits", [1, 3, 20])
def test_fused_combine_and_reversed_splits(group, grouped, num_splits, monkeypatch):
    # The merge in the main launch (the last split's program), with the highest split first,
    # ragged lengths (short sequences have fewer splits than the grid); twice through one
    # prepared launch, so the per-row counters must be back at 0 after the first. 20 splits:
    # fused too (limit raised), 2 splits per merge step (10 steps).
    import kernels.paged_decode as dec
    from kernels.paged_decode import prepare_decode

    if num_splits > dec.FUSED_COMBINE_MAX_SPLITS:
        monkeypatch.setattr(dec, "FUSED_COMBINE_MAX_SPLITS", num_splits)
        monkeypatch.setattr(dec, "MERGE_FLOATS", 2 * 8 * HEAD_DIM)

    lens = [1, 15, 16, 17, 200] if not ON_GPU else [1, 15, 16, 17, 100, 3000, 20000]
    g = torch.Generator(device=DEVICE).manual_seed(11 + group)
    kv = make_paged_kv(lens, 2, HEAD_DIM, 8, torch.bfloat16, DEVICE, g)
    q = torch.randn(len(lens), 2 * group, HEAD_DIM, generator=g, device=DEVICE)
    q = q.to(torch.bfloat16)
    ref = paged_decode_reference(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    lse = torch.full(q.shape[:2], float("nan"), device=DEVICE)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    plain = paged_decode_attention(*args, grouped=grouped, num_splits=num_splits, block_n=BLOCK_N)
    launch = prepare_decode(
        *args,
        lse_out=lse,
        grouped=grouped,
        num_splits=num_splits,
        block_n=BLOCK_N,
        reverse_splits=True,
        fused_combine=True,
    )
    assert len(launch.launches) == 1, "fused: one launch"
    for _ in range(2):
        launch.out.fill_(float("nan"))
        lse.fill_(float("nan"))
        out = launch(kv.k_cache, kv.v_cache)
        assert bool(torch.isfinite(out).all()) and bool(torch.isfinite(lse).all())
        assert rel_err(out, ref) < TOL
        assert rel_err(out, plain.float()) < 1e-2
    reversed_only = paged_decode_attention(
        *args, grouped=grouped, num_splits=num_splits, block_n=BLOCK_N, reverse_splits=True
    )
    assert torch.equal(reversed_only, plain), "the launch order does not change the bits"


def test_grouped_equals_non_grouped():
    g = torch.Generator(device=DEVICE).manual_seed(7)
    kv = make_paged_kv(LENS, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    q = torch.randn(len(LENS), 16, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
    a, b = (
        paged_decode_attention(
            q,
            kv.k_cache,
            kv.v_cache,
            kv.block_tables,
            kv.seq_lens,
            grouped=grouped,
            num_splits=1,
            block_n=BLOCK_N,
        )
        for grouped in (True, False)
    )
    # Same tiles, same order of accumulation per query row: identical bits.
    assert torch.equal(a, b)


def test_strided_views_of_a_larger_pool():
    # K/V as head slices of a pool holding more heads, q as a head slice: non-contiguous
    # strides that the kernel takes as arguments.
    g = torch.Generator(device=DEVICE).manual_seed(3)
    kv = make_paged_kv(LENS, 4, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    k, v = kv.k_cache[:, 1:3], kv.v_cache[:, 1:3]
    q_full = torch.randn(len(LENS), 16, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
    q = q_full[:, 4:12]
    assert not k.is_contiguous() and not q.is_contiguous()
    out = paged_decode_attention(
        q, k, v, kv.block_tables, kv.seq_lens, block_n=BLOCK_N, num_splits=2
    )
    ref = paged_decode_reference(q, k, v, kv.block_tables, kv.seq_lens)
    assert rel_err(out, ref) < TOL


@settings(
    max_examples=8 if not ON_GPU else 25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    lens=st.lists(st.integers(1, 90), min_size=1, max_size=4),
    page_size=st.sampled_from(SUPPORTED_PAGE_SIZES),
    group=st.sampled_from([1, 4, 8]),
    num_kv_heads=st.integers(1, 2),
    grouped=st.booleans(),
    num_splits=st.sampled_from([None, 1, 2, 5]),
    dtype=st.sampled_from([torch.bfloat16, torch.float16]),
    seed=st.integers(0, 2**16),
)
def test_random_shapes(lens, page_size, group, num_kv_heads, grouped, num_splits, dtype, seed):
    check(lens, num_kv_heads, group, page_size, dtype, grouped, num_splits, seed)


def test_choose_split_policy():
    # batch 1 x 32K at the article's shape: 64 splits of 512 tokens x 8 KV heads = 512 programs.
    assert choose_split(32768, 32768, 8, 132, 64, programs_per_sm=8) == (64, 512)
    # batch 256 x 2K: 2048 programs already fill the GPU, no split, no second pass.
    assert choose_split(256 * 2048, 2048, 8, 132, 64, programs_per_sm=4) == (1, 2048)
    # 16 x 32K: work shared over ~528 programs -> ~8K-token splits.
    assert choose_split(16 * 32768, 32768, 8, 132, 64, programs_per_sm=4) == (5, 8000)
    # Defaults: the seed mix's 32K requests are cut into ~2.8K-token splits.
    assert choose_split(731179, 32768, 8, 132, 64) == (12, 2816)
    # Never below min_split_tokens: a short sequence stays whole.
    assert choose_split(300, 300, 1, 132, 64) == (1, 300)
    assert choose_split(300, 300, 1, 132, 64, min_split_tokens=128) == (3, 128)
    # cap_to_mean: a ragged batch's splits are no longer than its mean sequence; a uniform
    # batch's are unchanged.
    assert choose_split(731179, 32768, 8, 132, 64, 4, cap_to_mean=True, batch=100) == (5, 7360)
    assert choose_split(731179, 32768, 8, 132, 64, 4) == (3, 11136)
    assert choose_split(
        16 * 32768, 32768, 8, 132, 64, 4, cap_to_mean=True, batch=16, wave_fit=0.0
    ) == (5, 8000)
    # One sequence: SINGLE_SEQUENCE_PROGRAMS_PER_SM = 2 programs per SM at most (1 x 128K: 33
    # splits of 4,032 tokens, not 256 of 512; 1 x 32K: 32 of 1,024, not 64 of 512); up to 16K
    # the 512-token floor gives the same splits either way.
    assert choose_split(131072, 131072, 8, 132, 64, batch=1) == (33, 4032)
    assert choose_split(131072, 131072, 8, 132, 64, batch=2) == (256, 512)
    assert choose_split(32768, 32768, 8, 132, 64, batch=1) == (32, 1024)
    assert choose_split(32769, 32769, 8, 132, 64, batch=1) == (33, 1024)
    assert choose_split(16384, 16384, 8, 132, 64, batch=1) == choose_split(16384, 16384, 8, 132, 64)


def test_wave_fit_rule():
    # Near-uniform batches of <= 66 sequences x 8 KV heads (528 = 4 resident x 132 SMs): one
    # wave of k = 528 // (batch x 8) splits per sequence; 16 x 8K: 4 of 2,048 (default 16 of 512).
    assert choose_split(16 * 8192, 8192, 8, 132, 64, batch=16, wave_fit=1.1) == (4, 2048)
    assert choose_split(64 * 2048, 2048, 8, 132, 64, batch=64, wave_fit=1.1) == (1, 2048)
    assert choose_split(64 * 32768, 32768, 8, 132, 64, batch=64, wave_fit=1.1) == (1, 32768)
    # Ragged: the one-wave split (the 32K sequence in one program) is 2.2x a balanced share, so
    # the default rule's finer splits stay; so do batches over 66 sequences (seed mix: 100).
    ragged = [32768] + [8192] * 31
    assert choose_split(sum(ragged), 32768, 8, 132, 64, batch=32, wave_fit=1.3) == choose_split(
        sum(ragged), 32768, 8, 132, 64, batch=32, wave_fit=0.0
    )
    assert choose_split(731179, 32768, 8, 132, 64, batch=100, wave_fit=1.3) == (12, 2816)
    # Off (0): the 16-programs-per-SM rule alone; the default is 1.15.
    assert choose_split(16 * 8192, 8192, 8, 132, 64, batch=16, wave_fit=0.0) == (16, 512)
    assert choose_split(16 * 8192, 8192, 8, 132, 64, batch=16) == (4, 2048)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 40000), min_size=2, max_size=80),
    st.sampled_from([1, 2, 8]),
    st.sampled_from([0.5, 1.0, 1.1, 1.5, 4.0]),
)
def test_wave_fit_only_coarsens_and_fills_one_wave(lens, heads, slack):
    # Never more splits than the default rule (so decode_split_bound still bounds a device-split
    # graph); when it changes the split, every program is resident at once.
    from kernels.paged_decode import RESIDENT_PROGRAMS_PER_SM

    b, n, m = len(lens), sum(lens), max(lens)
    base = choose_split(n, m, heads, 132, 64, batch=b, wave_fit=0.0)
    fit = choose_split(n, m, heads, 132, 64, batch=b, wave_fit=slack)
    assert fit[0] <= base[0] and fit[1] >= base[1]
    if fit != base:
        programs = heads * sum(-(-x // fit[1]) for x in lens)
        assert programs <= RESIDENT_PROGRAMS_PER_SM * 132


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 40000), min_size=2, max_size=80),
    st.sampled_from([1, 2, 8]),
    st.sampled_from([1, 4, 8]),
)
def test_one_wave_split_is_the_shortest_that_fits(lens, heads, resident):
    # FlashInfer's rule: all programs in one resident wave, with the shortest such split (not
    # under the 512-token floor); past one wave of unsplit sequences, the default rule.
    import kernels.paged_decode as pd

    b, n, m = len(lens), sum(lens), max(lens)
    slots = resident * 132
    got = choose_split(n, m, heads, 132, 64, batch=b, one_wave=resident, lengths=lens)
    if b * heads > slots:
        assert got == choose_split(n, m, heads, 132, 64, batch=b)  # the default rule
        return
    splits, tokens = got
    assert splits == -(-m // tokens)
    # Never more splits than the 16-per-SM rule: decode_split_bound bounds it too.
    assert splits <= choose_split(n, m, heads, 132, 64, batch=b, wave_fit=0.0)[0]

    def programs(t: int) -> int:
        return heads * sum(-(-x // t) for x in lens)

    assert programs(tokens) <= slots
    floor = max(pd.MIN_SPLIT_TOKENS, -(-m // pd.MAX_SPLITS))
    if splits > 1 and tokens - 64 >= floor:
        assert programs(tokens - 64) > slots


def test_one_wave_slack_keeps_only_near_balanced_waves():
    # With one_wave_slack the one-wave split is taken only where its longest program is within
    # that factor of a balanced share: 16 x U(2K-8K) (1,472 vs 1,265 tokens) takes it, 64 x
    # U(1K-8K) (8,000 vs 4,687) keeps the default rule's 7 splits of 1,216.
    import numpy as np

    for n, lo, hi, seed, want in ((16, 2048, 8192, 1, (6, 1472)), (64, 1024, 8192, 2, (7, 1216))):
        lens = np.random.default_rng(seed).integers(lo, hi, size=n, endpoint=True).tolist()
        args = (sum(lens), max(lens), 8, 132, 64)
        got = choose_split(*args, batch=n, one_wave=4, lengths=lens, one_wave_slack=1.3)
        assert got == want
        if want[0] == 7:
            assert got == choose_split(*args, batch=n)


def test_wave_fit_through_the_launcher(monkeypatch):
    # On a pretend 1-SM device (4 resident programs): two 1,000-token sequences x 2 KV heads
    # take one wave of unsplit programs with wave_fit (4 splits of 256 without); a ragged pair
    # keeps the default rule's (6 of 192). Outputs are the reference's either way.
    import kernels.paged_decode as pd

    monkeypatch.setattr(pd, "_num_sms", lambda device: 1)
    for lens, splits, default in (([1000, 1000], 1, 4), ([1000, 200], 6, 6)):
        assert check(lens, 2, 4, 16, min_split_tokens=64, wave_fit=1.1) < TOL
        assert check(lens, 2, 4, 16, min_split_tokens=64, one_wave=4, lengths=lens) < TOL
        g = torch.Generator(device=DEVICE).manual_seed(0)
        kv = make_paged_kv(lens, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
        q = torch.randn(len(lens), 8, HEAD_DIM, device=DEVICE).to(torch.bfloat16)
        args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
        launch = pd.prepare_decode(*args, min_split_tokens=64, wave_fit=1.1)
        assert launch.num_splits == splits
        assert pd.prepare_decode(*args, min_split_tokens=64, wave_fit=0.0).num_splits == default


def test_single_sequence_pipeline_depth():
    # One sequence runs at SINGLE_SEQUENCE_NUM_STAGES (with at most 2 programs per SM, which its
    # shared memory fits in one wave); larger batches at the default depth; a given num_stages
    # wins. The answer is the reference's either way (the interpreter ignores the depth).
    from kernels.paged_decode import (
        DEFAULT_CONFIG,
        SINGLE_SEQUENCE_NUM_STAGES,
        prepare_decode,
    )

    g = torch.Generator(device=DEVICE).manual_seed(5)
    for lens, want in (([3000], SINGLE_SEQUENCE_NUM_STAGES), ([3000, 17], None)):
        kv = make_paged_kv(lens, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
        q = torch.randn(len(lens), 8, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
        args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
        stages = prepare_decode(*args, block_n=BLOCK_N).launches[0].kwargs["num_stages"]
        assert stages == (want or DEFAULT_CONFIG["num_stages"])
        assert prepare_decode(*args, num_stages=3).launches[0].kwargs["num_stages"] == 3
    check([3000 if ON_GPU else 70], 2, 4, 16)


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("num_splits", [1, 3, 20])
def test_deferred_row_sum(group, grouped, num_splits):
    # The row sums kept per key and summed after the loop (session 10): the reference's answer
    # with one split (direct output), fused merges (3) and the separate combine pass (20), over
    # ragged lengths whose last tiles are partly masked; and the lse the cascade merges by.
    from kernels.paged_decode import prepare_decode

    check(LENS, 2, group, 16, grouped=grouped, num_splits=num_splits, deferred_row_sum=True)
    g = torch.Generator(device=DEVICE).manual_seed(3)
    kv = make_paged_kv(LENS, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    q = torch.randn(len(LENS), 2 * group, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    lse = {}
    for deferred in (False, True):
        lse[deferred] = torch.full(q.shape[:2], float("nan"), device=DEVICE)
        launch = prepare_decode(
            *args,
            lse_out=lse[deferred],
            grouped=grouped,
            num_splits=num_splits,
            block_n=BLOCK_N,
            deferred_row_sum=deferred,
        )
        assert launch.launches[0].kwargs["DEFERRED_ROW_SUM"] is deferred
        launch(kv.k_cache, kv.v_cache)
    assert torch.allclose(lse[True], lse[False], atol=1e-5, rtol=0)


@pytest.mark.parametrize("pdl", [False, True])
def test_pdl_combine(pdl):
    # The separate combine pass (20 splits > FUSED_COMBINE_MAX_SPLITS) as a programmatic
    # dependent launch (session 11): the reference's answer, twice through one prepared launch;
    # the launch options only where the GPU has PDL (never under the interpreter).
    from kernels.paged_decode import pdl_options, prepare_decode

    check(LENS, 2, 8, 16, num_splits=20, pdl_combine=pdl)
    g = torch.Generator(device=DEVICE).manual_seed(5)
    kv = make_paged_kv(LENS, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    q = torch.randn(len(LENS), 16, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    launch = prepare_decode(*args, num_splits=20, block_n=BLOCK_N, pdl_combine=pdl)
    combine = launch.launches[1].kwargs
    has_pdl = ON_GPU and torch.cuda.get_device_capability()[0] >= 9
    assert combine.get("launch_pdl", False) is (pdl and has_pdl)
    assert pdl_options(torch.device("cpu"), True) == {}
    ref = paged_decode_reference(*args)
    for _ in range(2):
        launch.out.fill_(float("nan"))
        assert rel_err(launch(kv.k_cache, kv.v_cache), ref) < TOL


def test_deferred_row_sum_caps_registers_on_the_gpu_only():
    # maxnreg with deferred row sums (session 11: 4 programs per SM at every GROUP), on a GPU.
    from kernels.paged_decode import DEFERRED_ROW_SUM_MAX_REGISTERS, register_cap

    cuda = torch.device("cuda")
    assert register_cap(cuda, True) == {"maxnreg": DEFERRED_ROW_SUM_MAX_REGISTERS}
    assert register_cap(cuda, False) == {} and register_cap(torch.device("cpu"), True) == {}


def test_tail_merge_rule():
    # 256 x 8K under the 16-per-SM rule: splits of 8,000 leave a 192-token second split per
    # sequence; tail_merge 0.25 runs them unsplit. 1 x (32K + 1) (33 of 1,024, the last of 1
    # token) is cut for 32 splits, 1,025 tokens rounded up to 1,088: 31 splits. Splits that are
    # already even do not change.
    assert choose_split(256 * 8192, 8192, 8, 132, 64, batch=256) == (2, 8000)
    assert choose_split(256 * 8192, 8192, 8, 132, 64, batch=256, tail_merge=0.25) == (1, 8192)
    assert choose_split(32769, 32769, 8, 132, 64, batch=1, tail_merge=0.25) == (31, 1088)
    for n, lens in ((16, 2048), (16, 8192), (64, 2048)):
        args = (n * lens, lens, 8, 132, 64)
        assert choose_split(*args, batch=n, tail_merge=0.25) == choose_split(*args, batch=n)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 40000), min_size=1, max_size=80),
    st.sampled_from([1, 2, 8]),
    st.sampled_from([0.1, 0.25, 0.5, 1.0]),
)
def test_tail_merge_only_coarsens(lens, heads, frac):
    # Never more splits than without it (decode_split_bound still bounds device-split graphs),
    # splits cover the longest sequence, and the last one is not a sliver unless unsplit.
    b, n, m = len(lens), sum(lens), max(lens)
    base = choose_split(n, m, heads, 132, 64, batch=b)
    splits, tokens = choose_split(n, m, heads, 132, 64, batch=b, tail_merge=frac)
    assert splits <= base[0] and tokens >= base[1]
    assert splits == -(-m // tokens)
    if splits > 1 and (splits, tokens) != base:
        assert tokens % 64 == 0
        assert (splits - 1) * tokens < m


def test_wave_fit_on_used_slots():
    # Uniform 4,500-token batches whose one-wave splits leave slots idle (12 x 8 x 5 = 480, 24 x
    # 8 x 2 = 384, 48 x 8 = 384 of 528) fail wave_fit's test against all slots and take the
    # 16-per-SM rule (9 x 512, 9 x 512, 6 x 832); tested against the programs launched they run
    # one wave. Past one wave of unsplit sequences (98 x 8 > 528) nothing changes; a ragged
    # batch (one 32K among 8K ones) keeps the finer splits either way.
    for b, old, new in (
        (12, (9, 512), (5, 960)),
        (24, (9, 512), (2, 2304)),
        (48, (6, 832), (1, 4500)),
    ):
        args = (b * 4500, 4500, 8, 132, 64)
        assert choose_split(*args, batch=b, wave_fit_used_slots=False) == old
        assert choose_split(*args, batch=b, wave_fit_used_slots=True) == new
        assert choose_split(*args, batch=b) == new  # the default since session 10
    args = (98 * 4500, 4500, 8, 132, 64)
    assert choose_split(*args, batch=98) == choose_split(*args, batch=98, wave_fit_used_slots=False)
    # A wave under WAVE_FIT_MIN_FILL of the slots (40 x 8 = 320 of 528) keeps the finer splits.
    args = (40 * 8192, 8192, 8, 132, 64)
    assert choose_split(*args, batch=40) == choose_split(*args, batch=40, wave_fit=0.0) == (7, 1280)
    ragged = [32768] + [8192] * 31
    args = (sum(ragged), 32768, 8, 132, 64)
    assert choose_split(*args, batch=32, wave_fit_used_slots=True) == choose_split(
        *args, batch=32, wave_fit=0.0
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 40000), min_size=2, max_size=80),
    st.sampled_from([1, 2, 8]),
    st.sampled_from([1.0, 1.15, 1.5]),
)
def test_wave_fit_on_used_slots_only_coarsens_and_fills_one_wave(lens, heads, slack):
    from kernels.paged_decode import RESIDENT_PROGRAMS_PER_SM

    b, n, m = len(lens), sum(lens), max(lens)
    base = choose_split(n, m, heads, 132, 64, batch=b, wave_fit=0.0)
    fit = choose_split(n, m, heads, 132, 64, batch=b, wave_fit=slack, wave_fit_used_slots=True)
    assert fit[0] <= base[0] and fit[1] >= base[1]
    if fit != base:
        programs = heads * sum(-(-x // fit[1]) for x in lens)
        assert programs <= RESIDENT_PROGRAMS_PER_SM * 132
