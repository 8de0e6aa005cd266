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
from sim.latency.prefill_batch import PrefillBatch, features, fit_prefill_batch, work_list

CALIBRATION = Path(__file__).resolve().parents[2] / "kernels" / "calibration" / "h200.json"


def test_work_list_counts_the_kernels_query_tiles_and_the_keys_they_read():
    # GQA 4 (padded 4), block_m 128: the longest chunk (40 tokens, 160 rows) takes 128-row tiles
    # of 32 tokens. Chunk (40, 100): tiles over rows 0-31 (keys 100 + 32) and 32-39 (100 + 40);
    # chunk (5, 0): one tile (keys 5). Two KV heads: every count twice.
    programs, keys, longest = work_list([40, 5, 0], [100, 0, 7], 4, 2, 128)
    assert (programs, keys, longest) == (2 * 3, 2 * (132 + 140 + 5), 140)
    # one short chunk: the tile shrinks to what it needs (16 rows: 4 tokens), no fewer
    assert work_list([3], [10], 4, 1, 128) == (1, 13, 13)
    assert work_list([9], [0], 4, 1, 128) == (1, 9, 9)  # 36 rows -> 64-row tile: 16 tokens
    assert work_list([0], [50], 4, 1, 128) == (0, 0, 0)


def test_features_switch_from_the_split_extra_to_the_longest_program_when_tiles_fill():
    assert features(10, 5000, 700, 132) == (1.0, 5000 / 132 / 1e3, 10 / 132, 0.0, 1.0)
    assert features(132, 5000, 700, 132) == (1.0, 5000 / 132 / 1e3, 1.0, 0.7, 0.0)


def test_fit_recovers_the_coefficients_it_was_generated_with():
    truth = PrefillBatch((0.02, 0.03, 0.004, 0.006, -0.003), 4, 8, 128, 132)
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
    model = PrefillBatch(tuple(entry[k] for k in "akpls"), 4, 8, entry["block_m"], entry["sms"])  # type: ignore[arg-type]
    parts = batched.parts(four)  # type: ignore[attr-defined]
    assert parts["prefill_attn_s"] == 32 * model.ms([128] * 4, [2048] * 4) * 1e-3
    # the engine's four chunks of 128 over 2K run in one launch at about half their sum alone
    assert parts["prefill_attn_s"] < 0.7 * summed.parts(four)["prefill_attn_s"]  # type: ignore[attr-defined]


def test_a_shard_without_an_entry_names_the_field_and_the_way_out(tmp_path):
    cal = json.loads(CALIBRATION.read_text())
    cal["prefill_batches"] = [e for e in cal["prefill_batches"] if e["shard"] != "llama-3-8b"]
    (tmp_path / "h200.json").write_text(json.dumps(cal))
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    gpu = cfg.gpu.model_copy(update={"prefill_batch": "measured"})
    with pytest.raises(
        CalibrationError, match="gpu.prefill_batch: measured needs a prefill_batches"
    ):
        calibrated_latency_for(cfg.model, gpu, 1, tmp_path)
    assert calibrated_latency_for(cfg.model, cfg.gpu, 1, tmp_path) is not None  # off: fine
    cal["prefill_batches"] = [{"q_heads": 32, "kv_heads": 8, "head_dim": 128, "a": "x"}]
    (tmp_path / "h200.json").write_text(json.dumps(cal))
    with pytest.raises(CalibrationError, match="prefill_batches: needs heads"):
        calibrated_latency_for(cfg.model, gpu, 1, tmp_path)


def test_measured_prefill_batch_without_a_calibrated_table_is_a_config_error():
    cfg = parse_config({"model": "llama-3-8b", "gpu": "h100", "node": {"num_gpus": 1, "tp": 1}})
    with pytest.raises(ConfigError, match="need a calibration file"):
        make_latency_model(cfg.model, cfg.gpu.model_copy(update={"prefill_batch": "measured"}), 1)
