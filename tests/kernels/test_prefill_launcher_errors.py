"""Bad input to the paged prefill launcher raises a clear ValueError before any kernel runs."""

import pytest
import torch

from kernels.paged_prefill import paged_prefill_attention, plan_prefill
from kernels.reference import make_prefill_batch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def inputs():
    g = torch.Generator(device=DEVICE).manual_seed(0)
    q, kv, cu = make_prefill_batch([5, 30], [3, 10], 2, 4, 32, 16, torch.bfloat16, DEVICE, g)
    return dict(
        q=q,
        k_cache=kv.k_cache,
        v_cache=kv.v_cache,
        block_tables=kv.block_tables,
        seq_lens=kv.seq_lens,
        cu_seqlens_q=cu,
    )


def call(**kw):
    return paged_prefill_attention(**kw, block_m=32, block_n=16)


def test_valid_inputs_run(inputs):
    assert torch.isfinite(call(**inputs)).all()


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda d: d.update(q=d["q"][:, :7]), "not a multiple of num_kv_heads"),
        (lambda d: d.update(q=d["q"].float()), "bf16 or fp16 only"),
        (lambda d: d.update(k_cache=d["k_cache"].half()), "dtypes differ"),
        (lambda d: d.update(v_cache=d["v_cache"][:, :1]), "differ in shape"),
        (lambda d: d.update(q=d["q"][0]), "must be \\[total_new"),
        (lambda d: d.update(cu_seqlens_q=d["cu_seqlens_q"].long()), "cu_seqlens_q must be int32"),
        (lambda d: d.update(cu_seqlens_q=d["cu_seqlens_q"][:2]), "batch \\+ 1"),
        (lambda d: d.update(block_tables=d["block_tables"].long()), "block_tables must be int32"),
        (lambda d: d.update(block_tables=d["block_tables"][:1]), "block_tables must be \\[batch=2"),
    ],
)
def test_bad_shapes_and_dtypes(inputs, mutate, match):
    mutate(inputs)
    with pytest.raises(ValueError, match=match):
        call(**inputs)


def test_cu_seqlens_must_cover_q(inputs):
    inputs["cu_seqlens_q"] = torch.tensor([0, 3, 12], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="end at total_new"):
        call(**inputs)


def test_decreasing_cu_seqlens(inputs):
    inputs["cu_seqlens_q"] = torch.tensor([0, 14, 13], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="not decrease"):
        call(**inputs)


def test_seq_lens_must_include_the_chunk(inputs):
    inputs["seq_lens"] = torch.tensor([2, 40], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="count the chunk"):
        call(**inputs)


def test_sequence_longer_than_its_table(inputs):
    inputs["seq_lens"] = torch.tensor([8, 49], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="longer than its block table"):
        call(**inputs)


@pytest.mark.parametrize("bad_id", [-1, 10_000])
def test_page_table_outside_the_pool(inputs, bad_id):
    inputs["block_tables"] = inputs["block_tables"].clone()
    inputs["block_tables"][1, 2] = bad_id  # request 1 (40 tokens) uses pages 0..2
    with pytest.raises(ValueError, match="outside the pool"):
        call(**inputs)


def test_out_and_lse_must_match(inputs):
    with pytest.raises(ValueError, match="out must match q"):
        call(**inputs, out=torch.empty(13, 8, 32, dtype=torch.float16, device=DEVICE))
    with pytest.raises(ValueError, match="lse_out must be float32"):
        call(**inputs, lse_out=torch.empty(13, 8, dtype=torch.bfloat16, device=DEVICE))


def test_unsupported_page_size(inputs):
    inputs["k_cache"] = torch.zeros(8, 2, 4, 32, dtype=torch.bfloat16, device=DEVICE)
    inputs["v_cache"] = torch.zeros(8, 2, 4, 32, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(ValueError, match="page_size 4 not supported"):
        call(**inputs)


def test_plan_for_another_batch_is_rejected(inputs):
    plan = plan_prefill([3, 9], [8, 39], 2, 4, block_m=32, block_n=16)
    with pytest.raises(ValueError, match="another batch"):
        call(**inputs, plan=plan)
    with pytest.raises(ValueError, match="block_m"):
        plan_prefill([3], [8], 2, 32, block_m=16)
