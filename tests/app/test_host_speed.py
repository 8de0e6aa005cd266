"""`kvsched validate --host-speed`: the host's measured speed replayed (kvsched/host_speed.py).

Simulated runs written in the engine's layout (tests/app/test_validate.py) with probe samples
made up: a constant speed changes nothing (the step-by-step driver it needs gives the fast
driver's results), a probe's host time at twice the speed where its probe says so is fitted to
the terms it was made from, and a run's slow window prices exactly its steps' host part twice.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kvsched.host_speed import (
    HostPricing,
    HostSpeed,
    HostSpeedExecutor,
    host_exponent,
    host_price_s,
)
from kvsched.validate import (
    HOST_FEATURES,
    load_engine_run,
    measured_overheads,
    measured_requests,
    simulate,
    validate,
    with_overheads,
)
from sim.config import ConfigError
from sim.latency.base import StepShape
from sim.latency.factory import overhead_terms
from sim.scheduler import Step
from tests.app.test_validate import CLOSED_LOOP, OPEN_LOOP, write_as_engine_run

FAST_S, SLOW_S = 1e-5, 2e-5  # the probe's seconds at full and half speed
INTERVAL_S = 0.02


def write_speed(run_dir, slow_from: float = np.inf, slow_to: float = np.inf) -> None:
    t = np.arange(0.0, 31.0, INTERVAL_S)
    probe = np.where((t >= slow_from) & (t < slow_to), SLOW_S, FAST_S)
    pd.DataFrame({"t_s": t, "probe_s": probe}).to_csv(run_dir / "engine" / "host_speed.csv")


def with_host_time(run_dir, slow_from: float = np.inf, slow_to: float = np.inf) -> None:
    """0.2 ms per step + 5 us per decode of scheduler time, off the GPU clock; twice that in
    the slow window."""
    path = run_dir / "engine" / "steps.csv"
    steps = pd.read_csv(path)
    slow = (steps.start_s >= slow_from) & (steps.start_s < slow_to)
    steps["gpu_s"] = steps.duration_s
    steps["sched_s"] = (2e-4 + 5e-6 * steps.num_decode) * np.where(slow, 2.0, 1.0)
    steps.to_csv(path, index=False)


@pytest.fixture
def runs(tmp_path):
    run, probe = tmp_path / "run", tmp_path / "probe"
    write_as_engine_run(OPEN_LOOP, run)
    write_as_engine_run(CLOSED_LOOP, probe)
    return run, probe


def test_smoothing_and_lookup():
    t = np.arange(0.0, 2.0, 0.02)
    speed = HostSpeed.smoothed(t[::-1], np.where(t >= 1.0, SLOW_S, FAST_S)[::-1])
    assert (
        speed.at(np.array([0.1, 0.5, 1.5, 1.99, 5.0])).tolist() == [FAST_S, FAST_S] + [SLOW_S] * 3
    )
    assert speed.at(0.999)[0] == SLOW_S  # nearest sample (1.0): its window's median
    assert speed.at(0.85)[0] == FAST_S  # 7 of 13 samples within +-0.125 s are fast


def test_a_constant_speed_changes_no_number(runs):
    run, probe = runs
    with_host_time(probe)
    for d in runs:
        write_speed(d)
    plain, plain_tables = validate(run, [probe])
    replayed, tables = validate(run, [probe], host_speed=True)
    assert replayed["host_speed_reference_s"] == FAST_S
    assert replayed["host_speed_factor_median"] == 1.0
    shared = set(plain) - {"run"}
    assert shared <= set(replayed)
    for key in shared:
        if isinstance(plain[key], str):
            assert replayed[key] == plain[key], key
        else:
            assert replayed[key] == pytest.approx(plain[key], rel=1e-12, abs=1e-15), key
    pd.testing.assert_frame_equal(tables["simulated"], plain_tables["simulated"])


def test_probe_host_time_at_its_speed_fits_the_terms_it_came_from(runs):
    run, probe = runs
    with_host_time(probe, slow_from=18.0, slow_to=31.0)  # the probe's last 40% at half speed
    write_speed(probe, slow_from=18.0, slow_to=31.0)
    write_speed(run)
    result, tables = validate(run, [probe], host_speed=True)
    assert result["host_speed_reference_s"] == FAST_S  # the probe's median speed
    assert result["host_speed_exponent"] == pytest.approx(1.0, abs=1e-9)  # made proportional
    # the least-absolute-error solver lands within a nanosecond (a table change moved it 0.4 ns)
    assert result["step_overhead_s"] == pytest.approx(2e-4, abs=1e-9)
    assert result["decode_overhead_s"] == pytest.approx(5e-6, abs=1e-10)
    # mostly slow: the terms are stated at the slow speed, and a run at full speed is priced
    # at half of them (the same prices)
    with_host_time(probe, slow_from=12.0, slow_to=31.0)
    write_speed(probe, slow_from=12.0, slow_to=31.0)
    slow, slow_tables = validate(run, [probe], host_speed=True)
    assert slow["host_speed_reference_s"] == SLOW_S
    assert slow["host_speed_factor_median"] == pytest.approx(0.5, rel=1e-12)
    assert slow["step_overhead_s"] == pytest.approx(4e-4, abs=2e-9)
    assert slow["decode_overhead_s"] == pytest.approx(1e-5, abs=2e-10)
    np.testing.assert_allclose(
        slow_tables["steps"].predicted_s, tables["steps"].predicted_s, rtol=1e-5
    )


def test_a_slow_window_prices_its_steps_host_part_twice(runs):
    run, probe = runs
    with_host_time(probe)
    write_speed(probe)
    write_speed(run)
    flat, flat_tables = validate(run, [probe], host_speed=True)
    write_speed(run, slow_from=3.0, slow_to=6.0)  # the run's 32 requests end by ~9 s
    slow, tables = validate(run, [probe], host_speed=True)
    steps = pd.read_csv(run / "engine" / "steps.csv")
    added = tables["steps"].predicted_s - flat_tables["steps"].predicted_s
    host = flat["step_overhead_s"] + flat["decode_overhead_s"] * steps.num_decode
    inside = (steps.start_s > 3.2) & (steps.start_s < 5.8) & (steps.num_prefill == 0)
    outside = (steps.start_s < 2.8) | (steps.start_s > 6.2)
    assert inside.sum() > 20 and outside.sum() > 20
    assert np.allclose(added[inside], host[inside], rtol=1e-9, atol=1e-15)
    assert (added[outside] == 0).all()
    assert slow["host_speed_factor_median"] == 1.0  # 3 of the 31 s slow
    measured, sim = tables["measured"], tables["simulated"]
    in_window = measured.arrival_s.between(3.2, 5.0)
    slower = (sim.finish_s - sim.arrival_s)[in_window.to_numpy()]
    before = (flat_tables["simulated"].finish_s - flat_tables["simulated"].arrival_s)[
        in_window.to_numpy()
    ]
    assert (slower.dropna() >= before.dropna()).mean() > 0.9  # the same requests, later


def test_bad_or_missing_speed_files_are_refused_with_one_line(runs):
    run, probe = runs
    with pytest.raises(ConfigError, match="has no engine/host_speed.csv"):
        validate(run, [probe], host_speed=True)
    with pytest.raises(ConfigError, match="needs --overhead-from"):
        validate(run, host_speed=True)
    write_speed(run)
    write_speed(probe)
    path = probe / "engine" / "host_speed.csv"
    frame = pd.read_csv(path)
    frame.loc[3, "probe_s"] = -1.0
    frame.to_csv(path, index=False)
    with pytest.raises(ConfigError, match=r"host_speed.csv line 5: probe_s must be a number"):
        validate(run, [probe], host_speed=True)


def test_the_fit_divides_each_host_sample_by_its_speed():
    """Slow steps are the busy ones (the speed follows the decode count): the fit on the samples
    divided by their speed gets the terms back, the same samples at one speed do not."""
    rng = np.random.default_rng(5)
    n = 3000
    decodes = rng.integers(1, 64, n).astype(float)
    speed = np.where(decodes > 40, 2.0, 1.0)
    sample = {
        "priced": np.full(n, 0.01),
        "gpu_s": np.full(n, 0.01),
        "off_device": (2e-4 + 5e-6 * decodes) * speed,
        "prefill": np.zeros(n, dtype=bool),
        "graphed": np.ones(n, dtype=bool),
        "gaps": np.zeros(10),
        "decode_kv": np.full(n, 1000.0),
        **dict(zip(HOST_FEATURES, (decodes, 0 * decodes, 0 * decodes, 0 * decodes), strict=True)),
    }
    aware = measured_overheads([{**sample, "speed": speed}])
    assert aware["step_overhead_s"] == pytest.approx(2e-4, abs=1e-9)
    assert aware["decode_overhead_s"] == pytest.approx(5e-6, abs=1e-10)
    unaware = measured_overheads([sample])
    assert abs(unaware["decode_overhead_s"] - 5e-6) > 1e-6


class Shaped(Step):
    """A step that is only its shape (what the executor prices)."""

    def __init__(self, shape: StepShape):
        super().__init__(items=[])
        self._shape = shape

    def shape(self) -> StepShape:
        return self._shape


class FixedPrice:
    def run_step(self, node_id, step, now) -> float:
        return 0.01


def test_the_executor_prices_a_steps_host_part_at_the_speed_of_its_start(runs):
    """A step with a chunk: its host part (the host terms less the device fit's fixed extra)
    at twice the reference speed is added once more; a decode-only step the same without the
    extra; before the slow window nothing."""
    run, _ = runs
    write_speed(run, slow_from=3.0, slow_to=6.0)
    gpu = load_engine_run(run).cfg.gpu.model_copy(
        update={
            "step_overhead_s": 1e-4,
            "decode_overhead_s": 2e-6,
            "prefill_step_overhead_s": 1.5e-3,
            "mixed_decode_overhead_s": 1e-5,
            "chunk_overhead_s": 3e-5,
            "context_overhead_s": 5e-8,
            "host_token_overhead_s": 1e-7,
        }
    )
    frame = pd.read_csv(run / "engine" / "host_speed.csv")
    speed = HostSpeed.smoothed(frame.t_s.to_numpy(), frame.probe_s.to_numpy())
    executor = HostSpeedExecutor(FixedPrice(), gpu, HostPricing(speed, FAST_S, 1e-3))  # type: ignore[arg-type]
    chunk = Shaped(StepShape([300, 200], [1000, 0], 8, 4000))
    decode = Shaped(StepShape([], [], 8, 4000))
    chunk_host = 1e-4 + 2e-6 * 8 + 1.5e-3 + 1e-5 * 8 + 3e-5 * 2 + 5e-8 * 1000 + 1e-7 * 500 - 1e-3
    assert host_price_s(overhead_terms(gpu), 8, 2, 1000, 500, 1e-3) == pytest.approx(
        chunk_host, rel=1e-12
    )
    assert executor.run_step(0, chunk, 4.0) == pytest.approx(0.01 + chunk_host, rel=1e-12)
    assert executor.run_step(0, decode, 4.0) == pytest.approx(0.01 + 1e-4 + 2e-6 * 8, rel=1e-12)
    assert executor.run_step(0, chunk, 1.0) == 0.01
    # a fixed extra larger than the term holding it (clipped at 0 by the fit) is not subtracted
    clipped = gpu.model_copy(update={"prefill_step_overhead_s": 0.0})
    assert host_price_s(overhead_terms(clipped), 8, 2, 1000, 500, 1e-3) == pytest.approx(
        chunk_host + 1e-3 - 1.5e-3, rel=1e-12
    )


def test_a_run_wholly_at_half_speed_simulates_as_doubled_host_terms(runs):
    """The free simulation at twice the reference's probe time everywhere is the simulation of
    the same run priced with every host term doubled (the device fit's extra kept once)."""
    run, _ = runs
    write_speed(run, slow_from=0.0, slow_to=100.0)
    terms = {
        "step_overhead_s": 1e-4,
        "decode_overhead_s": 2e-6,
        "prefill_step_overhead_s": 1.5e-3,
        "mixed_decode_overhead_s": 1e-5,
        "context_overhead_s": 5e-8,
    }
    extra = 1e-3
    engine_run = with_overheads(load_engine_run(run), terms, "test")
    requests, clients = measured_requests(engine_run)
    frame = pd.read_csv(run / "engine" / "host_speed.csv")
    speed = HostSpeed.smoothed(frame.t_s.to_numpy(), frame.probe_s.to_numpy())
    replayed, _ = simulate(engine_run, requests, clients, HostPricing(speed, FAST_S, extra))
    doubled = {k: 2 * v for k, v in terms.items()}
    doubled["prefill_step_overhead_s"] = 2 * (terms["prefill_step_overhead_s"] - extra) + extra
    expected, _ = simulate(with_overheads(load_engine_run(run), doubled, "test"), requests, clients)
    assert len(replayed) == len(expected) > 10
    for column in ("first_token_s", "finish_s", "scheduled_s"):
        np.testing.assert_allclose(replayed[column], expected[column], rtol=1e-9, atol=1e-9)
    assert (replayed.cached_tokens.to_numpy() == expected.cached_tokens.to_numpy()).all()


def test_the_exponent_is_how_host_time_follows_the_probe():
    """Host time made to grow as the probe's time to the power 0.6, per decode count, with GC
    pauses: the exponent comes back; a speed that never moves says 1."""
    rng = np.random.default_rng(7)
    n = 4000
    decodes = rng.integers(1, 64, n).astype(float)
    speed = np.exp(rng.uniform(0.0, np.log(2.0), n))
    host = (2e-4 + 5e-6 * decodes) * speed**0.6
    host[rng.random(n) < 0.03] += 0.01  # pauses
    assert host_exponent(speed, host, decodes) == pytest.approx(0.6, abs=1e-9)
    assert host_exponent(np.ones(n), host, decodes) == 1.0
