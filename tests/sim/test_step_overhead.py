"""gpu.step_overhead_s: a fixed cost added to every step's price; absent, nothing changes."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import parse_config
from sim.latency import StepOverhead, StepPlan, make_latency_model


def _plan() -> StepPlan:
    return StepPlan(
        prefill_new=np.array([128]), prefill_ctx=np.array([0]), decode_ctx=np.array([1000, 2000])
    )


def test_zero_overhead_keeps_the_priced_model_itself():
    cfg = parse_config({})
    model = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    assert not isinstance(model, StepOverhead)
    assert (cfg.gpu.step_overhead_s, cfg.gpu.step_overhead_source) == (0.0, "not measured")


def test_overhead_adds_the_same_seconds_to_every_step():
    base = parse_config({})
    cfg = parse_config({"gpu": {"preset": "h200", "step_overhead_s": 0.002}})
    plain = make_latency_model(base.model, base.gpu, base.node.tp)
    priced = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    assert priced.step_time_s(_plan()) == pytest.approx(plain.step_time_s(_plan()) + 0.002)
    assert priced.name == f"{plain.name}+overhead(2 ms/step, 0 ms/prefill step, 0 us/token)"
