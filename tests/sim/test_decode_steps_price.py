"""`decode_steps_s` prices a stretch of decode-only steps in one numpy pass: for every context
sum it is the same float as `shape_time_s` of that step (the simulator's decode spans rely on
it to stay bit-identical to step-by-step pricing), on the calibrated tables (one GPU and TP 2,
below, inside and above the grids), the roofline and with per-step overheads."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import parse_config
from sim.latency import RooflineLatency, StepShape, make_latency_model
from sim.latency.base import OverheadTerms, StepOverhead


def _models():
    one = parse_config({"model": "llama-3-8b", "gpu": "h200", "node": {"num_gpus": 1, "tp": 1}})
    two = parse_config({"model": "article-70b", "gpu": "h200", "node": {"num_gpus": 2, "tp": 2}})
    cal1 = make_latency_model(one.model, one.gpu, 1)
    cal2 = make_latency_model(two.model, two.gpu, 2)
    return [
        cal1,
        cal2,
        RooflineLatency(one.model, one.gpu, 1),
        RooflineLatency(two.model, two.gpu, 2),
        StepOverhead(
            cal1,
            OverheadTerms(
                overhead_s=0.0031,
                prefill_extra_s=0.002,
                per_token_s=7.3e-6,
                per_decode_s=6.1e-6,
                mixed_decode_s=2.2e-5,
                per_chunk_s=1e-4,
                per_context_s=1.1e-7,
                device_scale=1.03,
                per_kv_s=1.47e-9,
            ),
        ),
    ]


MODELS = _models()


@settings(max_examples=200, deadline=None)
@given(
    model=st.sampled_from(range(len(MODELS))),
    num_decode=st.integers(0, 600),
    mean_ctx=st.lists(st.integers(0, 300_000), min_size=1, max_size=40),
)
def test_decode_steps_equal_step_by_step_prices(model, num_decode, mean_ctx):
    lat = MODELS[model]
    sums = np.array([m * max(num_decode, 1) + k for k, m in enumerate(mean_ctx)], dtype=np.int64)
    many = lat.decode_steps_s(num_decode, sums)
    one = [lat.shape_time_s(StepShape([], [], num_decode, int(s))) for s in sums]
    assert many.tolist() == one  # the same floats, bit for bit


def test_a_growing_span_is_priced_as_each_of_its_steps():
    lat = MODELS[0]
    sums = 5_000 + 37 * np.arange(2_000, dtype=np.int64)  # 37 decodes, each one token longer
    many = lat.decode_steps_s(37, sums)
    assert many.tolist() == [lat.shape_time_s(StepShape([], [], 37, int(s))) for s in sums]
    assert np.all(np.diff(many) >= 0)  # longer contexts never price faster
