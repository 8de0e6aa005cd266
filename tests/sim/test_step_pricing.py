"""The hot-path step price (`shape_time_s` of a `Step.shape()`) is the same float as the
array-based reference it replaced (numpy searchsorted, bilinear on arrays, a left-to-right sum of the terms), for random
steps on the H200 calibration table and on the roofline."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import parse_config
from sim.latency import CalibratedLatency, RooflineLatency, StepPlan, StepShape, make_latency_model


def _weights_ref(x, xs):
    if x <= xs[0]:
        return 0, 0.0
    i = min(int(np.searchsorted(xs, x, side="right")) - 1, xs.size - 2)
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


def _interp2_ref(x, y, xs, ys, zs):
    i, t = _weights_ref(x, xs)
    j, u = _weights_ref(y, ys)
    return float(
        (1 - t) * (1 - u) * zs[i, j]
        + t * (1 - u) * zs[i + 1, j]
        + (1 - t) * u * zs[i, j + 1]
        + t * u * zs[i + 1, j + 1]
    )


def _interp1_ref(x, xs, ys):
    i, t = _weights_ref(x, xs)
    return float((1 - t) * ys[i] + t * ys[i + 1])


def _reference_s(lat: CalibratedLatency, plan: StepPlan) -> float:
    """The array implementation as it was before issue 18 (calibrated.py, breakdown)."""
    tb = lat.table
    arr = lambda v: np.asarray(v, float)  # noqa: E731
    new, ctx, dec = plan.prefill_new, plan.prefill_ctx, plan.decode_ctx
    tokens = int(new.sum()) + int(dec.size)
    layers = lat.model.num_layers
    if tokens == 0:
        return 0.0
    parts = [layers * _interp1_ref(tokens, arr(tb["gemm"]["tokens"]), arr(tb["gemm"]["ms"])) * 1e-3]
    d, p = tb["decode_attn"], tb["prefill_attn"]
    if dec.size:
        mean_ctx = float(dec.sum()) / dec.size
        z = _interp2_ref(dec.size, mean_ctx, arr(d["batch"]), arr(d["context"]), arr(d["ms"]))
        parts.append(layers * z * 1e-3)
    if new.size:
        per_layer = sum(
            _interp2_ref(float(n), float(c), arr(p["new_tokens"]), arr(p["context"]), arr(p["ms"]))
            for n, c in zip(new, ctx, strict=True)
            if n > 0
        )
        parts.append(layers * per_layer * 1e-3)
    lm = tb["lm_head"]
    parts.append(_interp1_ref(float(dec.size + new.size), arr(lm["tokens"]), arr(lm["ms"])) * 1e-3)
    parts.append(lat._roofline.allreduce_s(tokens))
    return sum(parts)


CFG = parse_config({"model": "llama-3-8b", "gpu": "h200", "node": {"num_gpus": 1, "tp": 1}})
LAT = make_latency_model(CFG.model, CFG.gpu, 1)
ROOF = RooflineLatency(CFG.model, CFG.gpu, 1)

steps = st.tuples(
    st.lists(st.tuples(st.integers(1, 9000), st.integers(0, 140_000)), max_size=12),
    st.lists(st.integers(1, 200_000), max_size=600),
)


@settings(max_examples=400, deadline=None)
@given(steps)
def test_shape_price_is_the_array_price(step):
    chunks, decode = step
    plan = StepPlan(
        np.array([n for n, _ in chunks], dtype=np.int64),
        np.array([c for _, c in chunks], dtype=np.int64),
        np.array(decode, dtype=np.int64),
    )
    shape = StepShape([n for n, _ in chunks], [c for _, c in chunks], len(decode), sum(decode))
    assert isinstance(LAT, CalibratedLatency)
    assert LAT.shape_time_s(shape) == _reference_s(LAT, plan) == LAT.step_time_s(plan)
    assert ROOF.shape_time_s(shape) == ROOF.step_time_s(plan)
