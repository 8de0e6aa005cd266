"""Admission: the threshold rule, and its default derived from the rebuild cost of the latency model."""

from __future__ import annotations

import numpy as np
import pytest

from policies import make_policy
from policies.admission import Always, NoParams, Threshold, ThresholdParams
from sim.config import ConfigError, PolicySpec, parse_config
from sim.kv.rebuild_cost import break_even_tokens, rebuild_s
from sim.kv.views import Segment
from sim.latency import RooflineLatency


class LinearLatency:
    """A step costs max(floor_s, tokens x per_token_s): the roofline's linear part, exactly."""

    name = "linear"

    def __init__(self, floor_s: float, per_token_s: float):
        self.floor_s, self.per_token_s = floor_s, per_token_s

    def step_time_s(self, plan) -> float:
        return max(self.floor_s, plan.num_tokens * self.per_token_s)


def test_threshold_rule():
    policy = Threshold(ThresholdParams(min_tokens=64))
    assert not policy.admit(Segment(tokens=63, already_shared=False, break_even_tokens=16))
    assert policy.admit(Segment(tokens=64, already_shared=False, break_even_tokens=16))
    assert policy.admit(Segment(tokens=1, already_shared=True, break_even_tokens=16))
    assert policy.admit(
        Segment(tokens=1, already_shared=False, break_even_tokens=16, seen_before=True)
    )
    assert Always(NoParams()).admit(Segment(tokens=1, already_shared=False, break_even_tokens=16))


def test_default_threshold_is_the_break_even_length():
    policy = Threshold(ThresholdParams())
    assert not policy.admit(Segment(tokens=351, already_shared=False, break_even_tokens=352))
    assert policy.admit(Segment(tokens=352, already_shared=False, break_even_tokens=352))


def test_break_even_on_a_linear_model():
    # floor 10 ms, 0.1 ms a token: rebuild(n) = max(10, 0.1 n) - 10 <= 10 ms  <=>  n <= 200
    latency = LinearLatency(0.010, 0.0001)
    assert rebuild_s(latency, 100) == 0.0 and rebuild_s(latency, 300) == pytest.approx(0.020)
    assert break_even_tokens(latency, page_size=16) == 192  # 200 rounded down to pages
    assert break_even_tokens(latency, page_size=256) == 256  # never below one page


def test_break_even_of_the_article_model_on_the_h200_roofline():
    cfg = parse_config({})
    latency = RooflineLatency(cfg.model, cfg.gpu, cfg.node.tp)
    n = break_even_tokens(latency, 16)
    floor_s = latency.step_time_s(_one_token())
    assert rebuild_s(latency, n) <= floor_s < rebuild_s(latency, n + 16)
    assert n == 368  # ~2x the ridge point (790 TFLOP/s / 4.3 TB/s ~ 184 tokens at BF16)


def _one_token():
    from sim.latency import StepPlan

    return StepPlan(
        prefill_new=np.array([1]), prefill_ctx=np.array([0]), decode_ctx=np.zeros(0, dtype=np.int64)
    )


def test_bad_threshold_param():
    with pytest.raises(ConfigError, match="policies.admission.params.min_tokens"):
        make_policy("admission", PolicySpec(name="threshold", params={"min_tokens": -1}))
