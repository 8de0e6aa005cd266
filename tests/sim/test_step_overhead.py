"""The measured overhead terms (sim.latency.base.StepOverhead): a fixed cost added to every step's
price, host terms per decode, chunk and context token, a floor under the device time; absent,
nothing changes."""

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


def test_host_terms_add_per_decode_chunk_and_context_token_after_the_floor():
    """A mixed step of 2 chunks (128 new over 4,096 cached, 64 new from scratch) and 3 decodes:
    the device part is the kernels' price (scaled, per prefill token) under the floor; every host
    term adds on top, the mixed-step ones only to a step with a chunk."""
    base = parse_config({})
    plain = make_latency_model(base.model, base.gpu, base.node.tp)
    host = {
        "step_overhead_s": 2e-4,
        "decode_overhead_s": 6e-6,
        "prefill_step_overhead_s": 1e-3,
        "mixed_decode_overhead_s": 2e-5,
        "chunk_overhead_s": 1e-4,
        "context_overhead_s": 1e-7,
        "device_time_scale": 1.5,
    }
    cfg = parse_config({"gpu": {"preset": "h200", **host, "mixed_step_floor_s": 0.5}})
    priced = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    mixed = StepPlan(
        prefill_new=np.array([128, 64]),
        prefill_ctx=np.array([4096, 0]),
        decode_ctx=np.array([10, 20, 30]),
    )
    decodes_only = StepPlan(
        prefill_new=np.array([], dtype=np.int64),
        prefill_ctx=np.array([], dtype=np.int64),
        decode_ctx=np.array([10, 20, 30]),
    )
    decode_host = 2e-4 + 3 * 6e-6
    assert priced.step_time_s(mixed) == pytest.approx(
        0.5 + decode_host + 1e-3 + 3 * 2e-5 + 2 * 1e-4 + 4096 * 1e-7  # under the 0.5 s floor
    )
    assert priced.step_time_s(decodes_only) == pytest.approx(
        plain.step_time_s(decodes_only) * 1.5 + decode_host
    )


def test_decode_kv_term_adds_device_time_per_decode_context_token_before_the_floor():
    """`gpu.decode_kv_overhead_s`: device seconds per token of the decodes' contexts, after the
    scale and, in a step with a chunk, under the floor with the rest of the device part."""
    base = parse_config({})
    plain = make_latency_model(base.model, base.gpu, base.node.tp)
    terms = {"device_time_scale": 1.25, "decode_kv_overhead_s": 2e-9}
    cfg = parse_config({"gpu": {"preset": "h200", **terms, "mixed_step_floor_s": 0.5}})
    priced = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    decodes = StepPlan(
        prefill_new=np.array([], dtype=np.int64),
        prefill_ctx=np.array([], dtype=np.int64),
        decode_ctx=np.array([1000, 3000]),
    )
    assert priced.step_time_s(decodes) == pytest.approx(
        plain.step_time_s(decodes) * 1.25 + 4000 * 2e-9
    )
    assert priced.step_time_s(_plan()) == pytest.approx(0.5)  # a small mixed step: the floor
    assert "2 ns/decode KV token on the device" in priced.name


def test_cascade_prefix_pass_is_scaled_like_every_kernel():
    """A cascade's shared-prefix pass runs on the serving machine too: the device time scale
    applies to it (the KV term prices the cascade's tails, through their decode contexts)."""
    base = parse_config({})
    plain = make_latency_model(base.model, base.gpu, base.node.tp)
    terms = {"device_time_scale": 1.25, "decode_kv_overhead_s": 2e-9}
    cfg = parse_config({"gpu": {"preset": "h200", **terms}})
    priced = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    assert priced.cascade_prefix_s(8, 2048) == plain.cascade_prefix_s(8, 2048) * 1.25
