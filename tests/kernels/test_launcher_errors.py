"""Bad input to the launcher raises a clear ValueError before any kernel runs."""

import pytest
import torch

from kernels.paged_decode import paged_decode_attention
from kernels.reference import make_paged_kv

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def inputs():
    g = torch.Generator(device=DEVICE).manual_seed(0)
    kv = make_paged_kv([5, 40], 2, 32, 16, torch.bfloat16, DEVICE, g)
    q = torch.randn(2, 8, 32, generator=g, device=DEVICE).to(torch.bfloat16)
    return dict(
        q=q,
        k_cache=kv.k_cache,
        v_cache=kv.v_cache,
        block_tables=kv.block_tables,
        seq_lens=kv.seq_lens,
    )


def call(**kw):
    return paged_decode_attention(**kw)


def test_valid_inputs_run(inputs):
    assert torch.isfinite(call(**inputs)).all()


def test_head_counts_must_divide(inputs):
    inputs["q"] = inputs["q"][:, :7]
    with pytest.raises(ValueError, match="not a multiple of num_kv_heads"):
        call(**inputs)


def test_k_and_v_shapes_must_match(inputs):
    inputs["v_cache"] = inputs["v_cache"][:, :1]
    with pytest.raises(ValueError, match="differ in shape"):
        call(**inputs)


def test_float32_is_rejected(inputs):
    inputs["q"] = inputs["q"].float()
    with pytest.raises(ValueError, match="bf16 or fp16 only"):
        call(**inputs)


def test_mixed_dtypes_are_rejected(inputs):
    inputs["k_cache"] = inputs["k_cache"].half()
    with pytest.raises(ValueError, match="dtypes differ"):
        call(**inputs)


def test_head_dim_mismatch(inputs):
    inputs["q"] = torch.zeros(2, 8, 64, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(ValueError, match="head_dim differs"):
        call(**inputs)


@pytest.mark.parametrize("bad_id", [-1, 10_000])
def test_page_table_outside_the_pool(inputs, bad_id):
    inputs["block_tables"] = inputs["block_tables"].clone()
    inputs["block_tables"][1, 2] = bad_id  # sequence 1 (40 tokens) uses pages 0..2
    with pytest.raises(ValueError, match="outside the pool"):
        call(**inputs)


def test_unused_table_entries_are_not_checked(inputs):
    inputs["block_tables"] = inputs["block_tables"].clone()
    inputs["block_tables"][0, 1:] = 10_000  # sequence 0 (5 tokens) uses page slot 0 only
    assert torch.isfinite(call(**inputs)).all()


def test_sequence_longer_than_its_table(inputs):
    inputs["seq_lens"] = torch.tensor([5, 49], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="longer than its block table"):
        call(**inputs)


def test_empty_sequence(inputs):
    inputs["seq_lens"] = torch.tensor([0, 40], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match=">= 1"):
        call(**inputs)


def test_int64_tables_are_rejected(inputs):
    inputs["block_tables"] = inputs["block_tables"].long()
    with pytest.raises(ValueError, match="int32"):
        call(**inputs)


def test_non_unit_head_dim_stride(inputs):
    wide = torch.randn(*inputs["k_cache"].shape[:3], 64, device=DEVICE).to(torch.bfloat16)
    inputs["k_cache"] = wide[..., ::2]
    inputs["v_cache"] = wide[..., ::2]
    with pytest.raises(ValueError, match="unit stride along head_dim"):
        call(**inputs)


def test_unsupported_page_size(inputs):
    inputs["k_cache"] = torch.zeros(8, 2, 4, 32, dtype=torch.bfloat16, device=DEVICE)
    inputs["v_cache"] = torch.zeros(8, 2, 4, 32, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(ValueError, match="page_size 4 not supported"):
        call(**inputs)


def test_batch_mismatch(inputs):
    inputs["seq_lens"] = inputs["seq_lens"][:1]
    with pytest.raises(ValueError, match="seq_lens must be"):
        call(**inputs)


def test_out_must_match(inputs):
    with pytest.raises(ValueError, match="out must match q"):
        call(**inputs, out=torch.empty(2, 8, 32, dtype=torch.float16, device=DEVICE))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU to mix devices")
def test_devices_must_match(inputs):
    inputs["seq_lens"] = inputs["seq_lens"].cpu()
    with pytest.raises(ValueError, match="one device"):
        call(**inputs)
