"""Cascade (shared-prefix) decode vs the float32 reference over the full block tables, and the
decode kernel's log-sum-exp output that the merge relies on."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.cascade_decode import cascade_decode_attention, plan_cascade
from kernels.paged_decode import paged_decode_attention
from kernels.reference import make_paged_kv, make_shared_prefix_kv, paged_decode_reference

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
HEAD_DIM = 128 if ON_GPU else 32
PREFIX_CFG = {} if ON_GPU else {"block_m": 32, "block_n": 16, "num_warps": 4, "num_stages": 1}
DECODE_CFG = {} if ON_GPU else {"block_n": 16}
SCALE = 20 if ON_GPU else 1
TOL = 1e-2


def rel_err(out, ref):
    return float((out.float() - ref).norm() / ref.norm())


def check(
    lens,
    group_sizes,
    prefix_lens,
    num_kv_heads=2,
    group=4,
    page_size=16,
    dtype=torch.bfloat16,
    seed=0,
    tokens_per_split=None,
):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    kv = make_shared_prefix_kv(
        lens, group_sizes, prefix_lens, num_kv_heads, HEAD_DIM, page_size, dtype, DEVICE, g
    )
    q = torch.randn(len(lens), num_kv_heads * group, HEAD_DIM, generator=g, device=DEVICE)
    q = q.to(dtype)
    plan = plan_cascade(
        kv.block_tables,
        kv.seq_lens,
        group_sizes,
        prefix_lens,
        page_size,
        num_kv_heads,
        group,
        device=DEVICE,
        prefix_config=PREFIX_CFG,
        tokens_per_split=tokens_per_split,
    )
    assert plan.unique_tokens == sum(lens) - sum(
        (s - 1) * p for s, p in zip(group_sizes, prefix_lens, strict=True)
    )
    out = torch.full_like(q, float("nan"))
    res = cascade_decode_attention(
        q, kv.k_cache, kv.v_cache, plan, out=out, prefix_config=PREFIX_CFG, decode_config=DECODE_CFG
    )
    assert res is out and bool(torch.isfinite(out).all())
    ref = paged_decode_reference(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    err = rel_err(out, ref)
    assert err < TOL, f"rel err {err:.2e}"
    return err


def test_groups_with_and_without_a_prefix():
    lens = [s * SCALE for s in (40, 33, 70)] + [5, 49 * SCALE, 17 * SCALE]
    check(lens, [3, 1, 2], [32 * SCALE, 0, 16 * SCALE])


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("split", [None, 16])
def test_gqa_ratios_and_prefix_splits(group, split):
    lens = [65, 66, 80, 97, 130]
    check(lens, [5], [64], group=group, tokens_per_split=split, seed=group)


@pytest.mark.parametrize("page_size", [1, 8, 64])
def test_page_sizes(page_size):
    # Tails of one token (the prefix ends right before the newest token) and page +-1.
    p = 2 * page_size if page_size > 1 else 17
    check([p + 1, p + page_size + 1, p + 2 * page_size - 1], [3], [p], page_size=page_size)


def test_many_sequences_per_group_span_several_tiles():
    # 20 sequences x 4 heads = 80 rows: three 32-row tiles on CPU share one prefix.
    lens = [49 + i for i in range(20)]
    check(lens, [20], [48], dtype=torch.float16)


def test_plan_rejects_bad_groups():
    g = torch.Generator(device=DEVICE).manual_seed(0)
    kv = make_paged_kv([40, 40], 1, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    args = (kv.block_tables, kv.seq_lens)
    with pytest.raises(ValueError, match="do not share"):
        plan_cascade(*args, [2], [16], 16, 1, 4)
    with pytest.raises(ValueError, match="whole pages"):
        plan_cascade(*args, [2], [10], 16, 1, 4)
    with pytest.raises(ValueError, match="sum to batch"):
        plan_cascade(*args, [1], [0], 16, 1, 4)
    with pytest.raises(ValueError, match="not longer than"):
        plan_cascade(*args, [1, 1], [0, 48], 16, 1, 4, check=True)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_lse_output(num_splits):
    g = torch.Generator(device=DEVICE).manual_seed(1)
    lens = [1, 17, 70]
    kv = make_paged_kv(lens, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE, g)
    q = torch.randn(3, 8, HEAD_DIM, generator=g, device=DEVICE).to(torch.bfloat16)
    out = torch.full(q.shape, float("nan"), device=DEVICE)
    lse = torch.full((3, 8), float("nan"), device=DEVICE)
    paged_decode_attention(
        q,
        kv.k_cache,
        kv.v_cache,
        kv.block_tables,
        kv.seq_lens,
        out=out,
        lse_out=lse,
        num_splits=num_splits,
        **DECODE_CFG,
    )
    ref = paged_decode_reference(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    assert rel_err(out, ref) < TOL
    ref_lse = []
    for b, n in enumerate(lens):
        pages = kv.block_tables[b, : -(-n // 16)].long()
        k = kv.k_cache[pages].permute(0, 2, 1, 3).reshape(-1, 2, HEAD_DIM)[:n].float()
        s = torch.einsum("hd,thd->ht", q[b].float(), k.repeat_interleave(4, dim=1))
        ref_lse.append(torch.logsumexp(s / HEAD_DIM**0.5, dim=-1))
    assert float((lse - torch.stack(ref_lse)).abs().max()) < 1e-3


@settings(
    max_examples=5 if not ON_GPU else 15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    groups=st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 3), st.lists(st.integers(1, 30), max_size=4)),
        min_size=1,
        max_size=3,
    ),
    group=st.sampled_from([1, 4, 8]),
    split=st.sampled_from([None, 16]),
    seed=st.integers(0, 2**16),
)
def test_random_groups(groups, group, split, seed):
    page = 16
    lens, sizes, prefixes = [], [], []
    for size, pages, tails in groups:
        tails = (tails + [1] * size)[:size]
        sizes.append(size)
        prefixes.append(pages * page)
        lens += [pages * page + t for t in tails]
    check(lens, sizes, prefixes, group=group, seed=seed, tokens_per_split=split)
