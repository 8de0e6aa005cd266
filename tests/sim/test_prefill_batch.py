"""A step's prefill chunks priced as one launch (sim/latency/prefill_batch.py): the work list it
counts, the fit, and how the calibrated model uses it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sim.config import ConfigError, parse_config
from sim.latency import make_latency_model
from sim.latency.base import StepShape
from sim.latency.calibrated import CalibrationError, calibrated_latency_for
from sim.latency.prefill_batch import (
    COEFFICIENTS,
    PrefillBatch,
    features,
    fit_prefill_batch,
    split_target,
    work_list,
)

CALIBRATION = Path(__file__).resolve().parents[2] / "kernels" / "calibration" / "h200.json"


def test_work_list_counts_the_kernels_query_tiles_and_the_keys_they_read():
    # GQA 4 (padded 4), block_m 128: the longest chunk (40 tokens, 160 rows) takes 128-row tiles
    # of 32 tokens. Chunk (40, 100): tiles over rows 0-31 (keys 100 + 32) and 32-39 (100 + 40);
    # chunk (5, 0): one tile (keys 5). Two KV heads: every count twice.
    programs, keys, rows = work_list([40, 5, 0], [100, 0, 7], 4, 2, 128)
    assert (programs, keys, rows) == (2 * 3, 2 * (132 + 140 + 5), 128)
    # one short chunk: the tile shrinks to what it needs (16 rows: 4 tokens), no fewer
    assert work_list([3], [10], 4, 1, 128) == (1, 13, 16)
    assert work_list([9], [0], 4, 1, 128) == (1, 9, 64)  # 36 rows -> 64-row tile: 16 tokens
    assert work_list([0], [50], 4, 1, 128) == (0, 0, 16)


def test_features_carry_the_split_offset_below_the_kernels_split_target():
    assert features(10, 5000, 132, 132) == (1.0, 5000 / 132 / 1e3, 10 / 132, 1.0)
    assert features(132, 5000, 132, 132) == (1.0, 5000 / 132 / 1e3, 1.0, 0.0)
    # tiles under 64 rows: the kernel aims at 2 programs per SM before it stops splitting
    assert split_target(work_list([3], [0], 4, 1, 128)[2], 132) == 264
    assert split_target(work_list([40], [0], 4, 1, 128)[2], 132) == 132


def test_work_list_is_the_kernels_work_list():
    """Programs, keys and tile rows of plan_prefill's own work list (unsplit: one SM)."""
    from kernels.paged_prefill import plan_prefill

    rng = np.random.default_rng(1)
    for _ in range(300):
        k = int(rng.integers(1, 8))
        group, kv_heads = int(rng.choice([1, 2, 4, 6, 8])), int(rng.choice([1, 4, 8]))
        new = [int(rng.choice([0, 1, 9, 16, 17, 33, 100, 512, int(rng.integers(1, 3000))]))
               for _ in range(k)]  # fmt: skip
        ctx = [int(rng.integers(0, 20000)) for _ in range(k)]
        if sum(new) == 0:
            continue
        lens = [n + c for n, c in zip(new, ctx, strict=True)]
        plan = plan_prefill(new, lens, kv_heads, group, num_sms=1)
        if plan.work_class == "decode" or plan.tokens_per_split:
            continue
        work = plan.work.numpy()
        want = (len(work) * kv_heads, int((work[:, 3] - work[:, 2]).sum()) * kv_heads,
                plan.block_q * plan.group_p)  # fmt: skip
        assert work_list(new, ctx, group, kv_heads, 128) == want


def test_fit_recovers_the_coefficients_it_was_generated_with():
    truth = PrefillBatch((0.02, 0.03, 0.004, -0.003), 4, 8, 128, 132)
    rng = np.random.default_rng(0)
    points = []
    for _ in range(60):
        chunks = [
            (int(rng.integers(1, 2048)), int(rng.integers(0, 16384)))
            for _ in range(rng.integers(1, 6))
        ]
        points.append((chunks, truth.ms([n for n, _ in chunks], [c for _, c in chunks])))
    model, errors = fit_prefill_batch(points, 4, 8, 128, 132)
    assert model.coef == pytest.approx(truth.coef, rel=1e-6, abs=1e-9)
    assert np.abs(errors).max() < 1e-9


def latency(prefill_batch: str):
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    gpu = cfg.gpu.model_copy(update={"prefill_batch": prefill_batch})
    return make_latency_model(cfg.model, gpu, cfg.node.tp)


def test_h200_prices_several_chunks_as_one_launch_and_one_chunk_from_the_table():
    summed, batched = latency("sum"), latency("measured")
    one = StepShape([512], [2048], 4, 4 * 3000)
    assert batched.shape_time_s(one) == summed.shape_time_s(one)  # one chunk: the table
    four = StepShape([128] * 4, [2048] * 4, 0, 0)
    entry = next(e for e in json.loads(CALIBRATION.read_text())["prefill_batches"]
                 if e["shard"] == "llama-3-8b")  # fmt: skip
    model = PrefillBatch(tuple(entry[k] for k in COEFFICIENTS), 4, 8, 128, entry["sms"])
    alone = summed.parts(StepShape([128], [2048], 0, 0))["prefill_attn_s"]
    parts = batched.parts(four)
    assert parts["prefill_attn_s"] == max(32 * model.ms([128] * 4, [2048] * 4) * 1e-3, alone)
    # the engine's four chunks of 128 over 2K run in one launch at about half their sum alone
    assert parts["prefill_attn_s"] < 0.7 * summed.parts(four)["prefill_attn_s"]


def test_a_chunk_added_to_a_launch_never_lowers_its_price():
    batched = latency("measured")
    rng = np.random.default_rng(3)
    for _ in range(200):
        k = int(rng.integers(1, 6))
        new = [int(rng.choice([1, 4, 16, 64, 300, 2048])) for _ in range(k)]
        ctx = [int(rng.choice([0, 512, 8192, 30000])) for _ in range(k)]
        before = batched.parts(StepShape(new, ctx, 0, 0))["prefill_attn_s"]
        after = batched.parts(StepShape([*new, 1], [*ctx, 16384], 0, 0))["prefill_attn_s"]
        assert after >= before


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (None, "gpu.prefill_batch: measured needs a prefill_batches entry"),
        (7, "prefill_batches: needs a list of shards"),
        ([{"q_heads": 32, "kv_heads": 8, "head_dim": 128, "a": "x"}], "an entry needs q_heads"),
        (
            [
                {
                    "q_heads": 32,
                    "kv_heads": 8,
                    "head_dim": 128,
                    "block_m": 100,
                    "sms": 132,
                    "a": 0,
                    "k": 0,
                    "p": 0,
                    "s": 0,
                }
            ],
            "block_m a power of two",
        ),  # fmt: skip
        (
            [
                {
                    "q_heads": 32,
                    "kv_heads": 8,
                    "head_dim": 128,
                    "block_m": 128,
                    "sms": 0,
                    "a": 0,
                    "k": 0,
                    "p": 0,
                    "s": 0,
                }
            ],
            "sms >= 1",
        ),  # fmt: skip
        (
            [
                {
                    "q_heads": 32,
                    "kv_heads": 8,
                    "head_dim": 128,
                    "block_m": 128,
                    "sms": 132,
                    "a": "nan",
                    "k": 0,
                    "p": 0,
                    "s": 0,
                }
            ],
            "must be finite",
        ),  # fmt: skip
        (
            [
                {
                    "q_heads": 64,
                    "kv_heads": 8,
                    "head_dim": 128,
                    "block_m": 128,
                    "sms": 132,
                    "a": 0,
                    "k": 0,
                    "p": 0,
                    "s": 0,
                }
            ],
            "needs a prefill_batches entry for 32 query",
        ),  # fmt: skip
    ],
)
def test_a_bad_or_missing_section_is_one_error_naming_it(tmp_path, section, message):
    cal = json.loads(CALIBRATION.read_text())
    if section is None:
        del cal["prefill_batches"]
    else:
        cal["prefill_batches"] = section
    (tmp_path / "h200.json").write_text(json.dumps(cal))
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    gpu = cfg.gpu.model_copy(update={"prefill_batch": "measured"})
    with pytest.raises(CalibrationError, match=message):
        calibrated_latency_for(cfg.model, gpu, 1, tmp_path)
    assert calibrated_latency_for(cfg.model, cfg.gpu, 1, tmp_path) is not None  # off: fine


def test_measured_prefill_batch_without_a_calibrated_table_is_a_config_error():
    cfg = parse_config({"model": "llama-3-8b", "gpu": "h100", "node": {"num_gpus": 1, "tp": 1}})
    with pytest.raises(ConfigError, match="need a calibration file"):
        make_latency_model(cfg.model, cfg.gpu.model_copy(update={"prefill_batch": "measured"}), 1)
