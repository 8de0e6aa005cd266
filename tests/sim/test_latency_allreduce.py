"""The TP all-reduce is priced from the NCCL table measured on two H200s when the file has one."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.config import parse_config
from sim.latency import CALIBRATION_DIR, StepPlan, make_latency_model


def plan(tokens: int) -> StepPlan:
    return StepPlan(np.array([tokens]), np.array([0]), np.zeros(0, dtype=np.int64))


def test_tp2_all_reduce_is_two_measured_calls_per_layer():
    cfg = parse_config({"model": "article-70b"})  # TP 2 on the calibrated H200 preset
    latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    data = json.loads((CALIBRATION_DIR / "h200.json").read_text())
    entry = next(e for e in data["allreduce_nccl"] if e["tp"] == 2 and e["hidden"] == 8192)
    tokens = entry["tokens"][5]  # a grid point: no interpolation
    parts = latency.breakdown(plan(tokens))
    assert "allreduce_roofline_s" not in parts
    layers = cfg.model.num_layers
    assert parts["allreduce_nccl_s"] == pytest.approx(2 * layers * entry["ms"][5] * 1e-3)


def test_tp1_has_no_all_reduce_cost():
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    parts = latency.breakdown(plan(512))
    assert parts.get("allreduce_roofline_s", 0.0) == 0.0 and "allreduce_nccl_s" not in parts
