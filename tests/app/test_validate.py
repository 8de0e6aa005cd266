"""`kvsched validate` on a run whose "measurement" is a simulation: every error must be zero.

A simulated run written in the engine's layout is the one run whose true step times the latency
model knows exactly, so validate must report exact agreement: same step prices, same cached
tokens, same step compositions in the replay, same per-request latencies.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from kvsched.experiment import run_arm
from kvsched.validate import validate
from sim.config import ConfigError, parse_config
from sim.steps import steps_frame

OPEN_LOOP = {
    "name": "self-validation",
    "seed": 3,
    "duration_s": 30,
    "model": "llama-3-8b",
    "gpu": "h200",
    "node": {"num_gpus": 1, "tp": 1},
    "cluster": {"num_nodes": 1},
    "record_steps": True,
    "workload": {
        "name": "shared_prefix_groups",
        "params": {
            "num_groups": 4,
            "prompts_per_group": 8,
            "system_prompt_tokens": 1024,
            "question_tokens": 64,
            "output_tokens": 32,
            "arrival": "poisson",
            "rate": 4.0,
        },
    },
}
CLOSED_LOOP = {**OPEN_LOOP, "workload": {"name": "seed", "params": {"num_clients": 8}}}


def write_as_engine_run(raw: dict, run_dir) -> None:
    cfg = parse_config(raw)
    cluster, _, requests, _ = run_arm(cfg, "engine", show_progress=False)
    arm = run_dir / "engine"
    arm.mkdir(parents=True)
    (arm / "config.json").write_text(json.dumps(cfg.model_dump(mode="json")))
    requests.to_csv(arm / "requests.csv", index=False)  # full precision: exact times
    assert cluster.step_rows is not None
    steps_frame(cluster.step_rows).to_csv(arm / "steps.csv", index=False)


@pytest.mark.parametrize("raw", [OPEN_LOOP, CLOSED_LOOP], ids=["open", "closed"])
def test_a_simulated_run_validates_exactly(tmp_path, raw):
    write_as_engine_run(raw, tmp_path)
    result, tables = validate(tmp_path)
    assert result["replayed_steps"] > 50 and result["requests_compared"] > 10
    assert result["step_composition_mismatch"] == 0
    assert result["cached_tokens_mismatch"] == 0
    assert result["cached_tokens_mismatch_free_run"] == 0
    assert result["step_time_median_abs_err"] == pytest.approx(0, abs=1e-9)
    assert result["step_time_p90_abs_err"] == pytest.approx(0, abs=1e-9)
    for key in ("ttft", "tpot", "e2e"):
        assert result[f"{key}_median_abs_err"] == pytest.approx(0, abs=1e-9), key
        assert result[f"{key}_p90_abs_err"] == pytest.approx(0, abs=1e-9), key
        assert result[f"{key}_p50_rel_err"] == pytest.approx(0, abs=1e-9), key
        assert result[f"{key}_p90_rel_err"] == pytest.approx(0, abs=1e-9), key
    assert result["throughput_abs_err"] == 0
    # a simulated run's steps cost what the model says: nothing is left over to measure (the
    # measured cost is the time to the next step's start: a difference of stamps, exact to
    # rounding)
    from kvsched.validate import OVERHEAD_TERMS

    for term in OVERHEAD_TERMS:
        want = 1.0 if term == "device_time_scale" else 0.0
        assert result[f"measured_{term}"] == pytest.approx(want, abs=1e-12), term
    assert len(tables["steps"]) == result["replayed_steps"]


def test_the_validation_report_renders_every_metric(tmp_path):
    from reports.validation import render_validation

    write_as_engine_run(OPEN_LOOP, tmp_path)
    result, tables = validate(tmp_path)
    page = render_validation(result, tables)
    for key in ("step_time", "ttft", "tpot", "e2e"):
        assert f'id="fig-val-{key}"' in page
    assert page.startswith("<!doctype html>") and "<svg" in page


def test_the_prefill_terms_fit_recovers_known_terms():
    """Steps priced max(device + per_token * tokens, floor) + extra with known terms: the fit
    finds them (the grid holds them), a floor per subset (graphed, launched whole)."""
    import numpy as np

    from kvsched.validate import _fit_prefill_terms

    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 4096, 400).astype(float)
    graphed = tokens <= 512
    device = 2e-3 + tokens * 2e-6 + rng.uniform(0, 5e-3, 400)
    floor = np.where(graphed, 7e-3, 18.5e-3)
    target = np.maximum(device + 3e-7 * tokens, floor) + 1.2e-3
    per_token, extra, floors = _fit_prefill_terms(device, tokens, target, graphed)
    assert per_token == pytest.approx(3e-7)
    assert extra == pytest.approx(1.2e-3)
    assert floors == pytest.approx([7e-3, 18.5e-3])


def test_the_device_time_scale_is_the_decode_steps_gpu_time_over_their_price(tmp_path):
    """A run whose decode-only steps' GPU time is 1.1x what the kernels are priced at (another
    machine) measures a device time scale of 1.1 and no fixed overhead on top."""
    write_as_engine_run(OPEN_LOOP, tmp_path)
    steps_path = tmp_path / "engine" / "steps.csv"
    steps = pd.read_csv(steps_path)
    steps["gpu_s"] = steps.duration_s * 1.1
    steps.to_csv(steps_path, index=False)
    result, _ = validate(tmp_path)
    assert result["measured_device_time_scale"] == pytest.approx(1.1, rel=1e-9)
    assert result["measured_step_overhead_s"] == 0.0  # priced 10% over what the steps took


def test_a_steps_cost_runs_to_the_next_start_unless_the_engine_went_idle():
    from kvsched.validate import measured_step_s

    steps = pd.DataFrame(
        {
            "start_s": [0.0, 0.0105, 0.5],
            "duration_s": [0.010, 0.010, 0.010],
            "sched_s": [0.0002, 0.0003, 0.0004],
        }
    )
    busy_after = np.array([True, False, True])
    cost = measured_step_s(steps, busy_after)
    # step 0: to the next start (its duration, its apply, the loop, the next schedule); step 1:
    # the engine went idle after it, so duration + sched; the last step: the same
    assert cost.tolist() == pytest.approx([0.0105, 0.0103, 0.0104], abs=1e-12)


def test_a_repeat_is_compared_with_the_run_as_the_simulation_is(tmp_path):
    run, repeat = tmp_path / "run", tmp_path / "repeat"
    write_as_engine_run(OPEN_LOOP, run)
    write_as_engine_run(OPEN_LOOP, repeat)
    result, tables = validate(run, repeat=repeat)
    from reports.validation import render_validation

    assert "engine vs its repeat" in render_validation(result, tables)
    same = result["repeat"]  # the same config, seed and model: the same run
    assert same["run"] == "repeat" and same["requests_compared"] == result["requests_compared"]
    for key in ("ttft", "tpot", "e2e"):
        assert same[f"{key}_median_abs_err"] == 0 and same[f"{key}_p90_abs_err"] == 0, key
    assert same["throughput_abs_err"] == 0
    assert same["cached_tokens_mismatch"] == 0 and same["step_composition_mismatch"] == 0
    # every first token twice as late in the repeat: TTFT off by 100% for every request
    path = repeat / "engine" / "requests.csv"
    reqs = pd.read_csv(path)
    late = reqs.first_token_s - reqs.arrival_s
    reqs = reqs.assign(first_token_s=reqs.first_token_s + late, finish_s=reqs.finish_s + late)
    reqs.to_csv(path, index=False)
    slow = validate(run, repeat=repeat)[0]["repeat"]
    assert slow["ttft_median_abs_err"] == pytest.approx(1.0)
    assert slow["ttft_p90_abs_err"] == pytest.approx(1.0)
    other = tmp_path / "other"
    write_as_engine_run({**OPEN_LOOP, "seed": 4}, other)
    with pytest.raises(ConfigError, match="not a run of the same config \\(seed\\)"):
        validate(run, repeat=other)
    (repeat / "run_info.json").write_text(json.dumps({"graphs": "decode"}))
    with pytest.raises(ConfigError, match="not a run of the same config \\(graphs\\)"):
        validate(run, repeat=repeat)


def test_an_engine_run_is_simulated_with_the_engine_s_routing(tmp_path):
    """The engine routes inside its loop between steps: the simulation of its run (summary.json
    names a measured latency model) decides in no time; a simulated run keeps its config, run
    info or not, and still validates exactly."""
    from kvsched.validate import _as_served, load_engine_run

    write_as_engine_run(CLOSED_LOOP, tmp_path)
    (tmp_path / "run_info.json").write_text(json.dumps({"wall_s": 1.0, "date": "x"}))
    (tmp_path / "summary.json").write_text(json.dumps({"latency_model": "calibrated:h200"}))
    simulated = load_engine_run(tmp_path).cfg
    assert simulated.router.decision_time_s == parse_config(CLOSED_LOOP).router.decision_time_s
    result, _ = validate(tmp_path)
    assert result["ttft_p90_abs_err"] == pytest.approx(0, abs=1e-9)
    assert result["cached_tokens_mismatch_free_run"] == 0
    (tmp_path / "summary.json").write_text(json.dumps({"latency_model": "measured:NVIDIA H200"}))
    assert load_engine_run(tmp_path).cfg.router.decision_time_s == 0.0
    cfg = parse_config({**OPEN_LOOP, "router": {"decision_time_s": 2.5e-5}})
    served = _as_served(cfg, {"graphs": "decode"})
    assert served.router.decision_time_s == 0.0
    assert served.gpu.mixed_graph_max_tokens == 0
    assert served.model_copy(update={"router": cfg.router, "gpu": cfg.gpu}) == cfg
    (tmp_path / "run_info.json").write_text("{not json")
    with pytest.raises(ConfigError, match="run_info.json: not valid JSON"):
        load_engine_run(tmp_path)


def test_steps_written_with_rounded_times_still_validate(tmp_path):
    """kvsched run writes steps.csv with 9 decimals: back-to-back steps may then overlap by the
    rounding of two values, which is not an overlap."""
    write_as_engine_run(CLOSED_LOOP, tmp_path)
    path = tmp_path / "engine" / "steps.csv"
    pd.read_csv(path).to_csv(path, index=False, float_format="%.9f")
    result, _ = validate(tmp_path)
    assert result["step_composition_mismatch"] == 0 and result["cached_tokens_mismatch"] == 0
    assert result["step_time_median_abs_err"] < 1e-6


def test_the_host_fit_recovers_known_terms_and_drops_a_negative_one():
    """Least absolute error with non-negative terms: exact terms come back despite a slow tail
    (5% of steps 10 ms late: a GC pause); a feature whose cost would be negative is dropped (0)
    and the others refitted."""
    import numpy as np

    from kvsched.validate import _fit_nonneg_lad

    rng = np.random.default_rng(1)
    decodes = rng.integers(0, 96, 2000).astype(float)
    context = rng.integers(0, 30_000, 2000).astype(float)
    host = 2e-4 + 6e-6 * decodes + 1.2e-7 * context
    host[rng.random(2000) < 0.05] += 0.01
    fixed, per_decode, per_context = _fit_nonneg_lad([decodes, context], host)
    assert fixed == pytest.approx(2e-4, rel=1e-3)
    assert per_decode == pytest.approx(6e-6, rel=1e-3)
    assert per_context == pytest.approx(1.2e-7, rel=1e-3)
    cheaper = 3e-4 + 5e-6 * decodes - 1e-8 * context  # more context, less host time: not a cost
    fixed, per_decode, per_context = _fit_nonneg_lad([decodes, context], cheaper)
    assert per_context == 0.0
    assert per_decode > 0 and fixed > 0


def test_decode_device_fit_finds_a_scale_and_a_cost_per_kv_token():
    """Decode-only steps' GPU time = scale x priced + per KV token x context tokens: both
    recovered; a per-token term that comes out negative is not a cost (the scale is then the
    ratios' median, as without the term)."""
    from kvsched.validate import _fit_decode_device

    rng = np.random.default_rng(2)
    priced = rng.uniform(0.005, 0.03, 3000)
    kv = rng.integers(1_000, 300_000, 3000).astype(float)
    gpu = 1.04 * priced + 1.5e-9 * kv
    gpu[rng.random(3000) < 0.05] *= 1.3  # a slow tail
    scale, per_kv = _fit_decode_device(gpu / priced, kv / priced)
    assert scale == pytest.approx(1.04, rel=1e-4)
    assert per_kv == pytest.approx(1.5e-9, rel=1e-3)
    faster = (1.06 * priced - 5e-9 * kv) / priced  # more context, less time: no such cost
    assert _fit_decode_device(faster, kv / priced) == (float(np.median(faster)), 0.0)


def test_measured_overheads_price_chunk_steps_with_the_decode_kv_term():
    """measured_overheads end to end on synthetic steps: decode-only steps give the scale and
    the cost per decode KV token; a step with a chunk is fitted with both in its device price
    (its GPU time is exactly that plus 1 ms: it adds 1 ms, no per-token cost)."""
    from kvsched.validate import HOST_FEATURES, measured_overheads

    rng = np.random.default_rng(3)
    n = 2000
    prefill = rng.random(n) < 0.2
    priced = rng.uniform(0.005, 0.03, n)
    kv = rng.integers(1_000, 300_000, n).astype(float)
    gpu = 1.04 * priced + 1.5e-9 * kv + np.where(prefill, 1e-3, 0.0)
    decodes = rng.integers(1, 64, n).astype(float)
    tokens = np.where(prefill, rng.integers(16, 512, n), 0).astype(float)
    sample = {
        "priced": priced,
        "gpu_s": gpu,
        "off_device": 2e-4 + 5e-6 * decodes,
        "prefill": prefill,
        "graphed": np.ones(n, dtype=bool),
        "gaps": np.zeros(10),
        "decode_kv": kv,
        # decodes, chunks, the chunks' context, prefill tokens
        **dict(zip(HOST_FEATURES, (decodes, prefill * 1.0, prefill * 0.0, tokens), strict=True)),
    }
    terms = measured_overheads([sample])
    assert terms["device_time_scale"] == pytest.approx(1.04, rel=1e-4)
    assert terms["decode_kv_overhead_s"] == pytest.approx(1.5e-9, rel=1e-3)
    assert terms["token_overhead_s"] == pytest.approx(0.0, abs=1e-7)
    # what a one-chunk step adds to a decode-only step's price: the device extra (1 ms; the
    # host's time is the same for both kinds of step)
    added = terms["prefill_step_overhead_s"] + terms["chunk_overhead_s"]
    assert added == pytest.approx(1e-3, abs=2e-5)


def test_probes_pooled_in_either_order_and_of_another_engine_refused(tmp_path):
    """--overhead-from takes several probes (their steps pooled: the same terms in either order,
    to rounding; a probe and its copy, the probe's own terms); a probe of another TP, the run
    itself or a probe named twice is refused with one line."""
    run, probe, other = tmp_path / "run", tmp_path / "probe", tmp_path / "other"
    write_as_engine_run(OPEN_LOOP, run)
    write_as_engine_run(CLOSED_LOOP, probe)
    # the probe's host: 0.2 ms per step + 5 us per decode of scheduler time, off the GPU clock
    steps_path = probe / "engine" / "steps.csv"
    steps = pd.read_csv(steps_path)
    steps["gpu_s"] = steps.duration_s
    steps["sched_s"] = 2e-4 + 5e-6 * steps.num_decode
    steps.to_csv(steps_path, index=False)
    write_as_engine_run({**OPEN_LOOP, "node": {"num_gpus": 2, "tp": 2}}, other)
    ab, _ = validate(run, [probe])
    assert ab["step_overhead_s"] == pytest.approx(2e-4, rel=1e-6)
    assert ab["decode_overhead_s"] == pytest.approx(5e-6, rel=1e-6)
    pooled_ab, _ = validate(run, [probe, _copy_run(probe, tmp_path / "probe2")])
    pooled_ba, _ = validate(run, [tmp_path / "probe2", probe])
    from kvsched.validate import OVERHEAD_TERMS

    for term in OVERHEAD_TERMS:
        assert pooled_ab[term] == pytest.approx(pooled_ba[term], rel=1e-9, abs=1e-15), term
        assert pooled_ab[term] == pytest.approx(ab[term], rel=1e-6, abs=1e-12), term
    with pytest.raises(ConfigError, match="tp 2, the run's is 1"):
        validate(run, [other])
    with pytest.raises(ConfigError, match="the run itself"):
        validate(run, [probe, run])
    with pytest.raises(ConfigError, match="named twice"):
        validate(run, [probe, probe])


def _copy_run(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_a_device_fit_on_a_grid_edge_is_refused():
    """Chunk steps costing far more per token than the grid reaches: refused, not clamped."""
    from kvsched.validate import _fit_prefill_terms

    tokens = np.arange(1, 200, dtype=float) * 64
    device = np.full(tokens.size, 2e-3)
    target = device + 1e-4 * tokens  # 100 us per token: past the grid's 60
    with pytest.raises(ConfigError, match="cost per prefill token is at its grid's top"):
        _fit_prefill_terms(device, tokens, target, np.zeros(tokens.size, dtype=bool))
