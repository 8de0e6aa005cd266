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

from kvsched.host_speed import HostSpeed
from kvsched.validate import validate
from sim.config import ConfigError
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
    assert result["step_overhead_s"] == pytest.approx(2e-4, rel=1e-6)
    assert result["decode_overhead_s"] == pytest.approx(5e-6, rel=1e-6)
    # mostly slow: the terms are stated at the slow speed, and a run at full speed is priced
    # at half of them (the same prices)
    with_host_time(probe, slow_from=12.0, slow_to=31.0)
    write_speed(probe, slow_from=12.0, slow_to=31.0)
    slow, slow_tables = validate(run, [probe], host_speed=True)
    assert slow["host_speed_reference_s"] == SLOW_S
    assert slow["host_speed_factor_median"] == 0.5
    assert slow["step_overhead_s"] == pytest.approx(4e-4, rel=1e-6)
    assert slow["decode_overhead_s"] == pytest.approx(1e-5, rel=1e-6)
    np.testing.assert_allclose(
        slow_tables["steps"].predicted_s, tables["steps"].predicted_s, rtol=1e-6
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
