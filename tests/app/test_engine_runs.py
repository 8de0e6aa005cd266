"""`kvsched validate` on the engine runs measured on the H200 and committed under engine/runs/.

The replay drives the same scheduler and cache code with the engine's queue and step times, so
the cached tokens of every request and the composition of every step must agree exactly. The
committed validation.json beside each run must be what validate computes today (a change to the
latency model or the scheduler that moves a fidelity number shows up here, on purpose).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from kvsched.validate import validate

RUNS = Path(__file__).resolve().parents[2] / "engine" / "runs"


def _runs_module(name: str):
    spec = importlib.util.spec_from_file_location(name, RUNS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# How each committed file is computed: engine/runs/validations.py writes them
runs = _runs_module("validations")
MEASURED = runs.measured_runs()


def needs_trace_slice(run_dir: Path) -> None:
    """The Azure run replays a slice of ../shared/traces (the project reads traces from there,
    it does not copy them): the slice is built from the trace (engine/runs/azure_slice.py);
    only where the trace itself is absent is the run's validation skipped."""
    config = json.loads((run_dir / "engine" / "config.json").read_text())
    path = config["workload"]["params"].get("path")
    if not path or (RUNS.parents[1] / path).is_file():
        return
    slicer = _runs_module("azure_slice")
    if RUNS.parents[1] / path != slicer.SLICE or not slicer.TRACE.is_file():
        pytest.skip(f"{run_dir.name}: trace slice {path} not on this machine")
    slicer.build()


def test_there_are_measured_runs():
    assert len(MEASURED) >= 4, f"engine runs with steps.csv under {RUNS}"


@pytest.mark.parametrize("run_dir", MEASURED, ids=[p.name for p in MEASURED])
def test_the_replay_agrees_exactly_and_the_committed_numbers_hold(run_dir):
    needs_trace_slice(run_dir)
    result, _ = validate(run_dir, repeat=runs.repeat_for(run_dir))
    assert result["cached_tokens_mismatch"] == 0
    assert result["step_composition_mismatch"] == 0
    assert_committed(result, run_dir / "validation.json")


HELD_OUT = sorted(p.parent for p in RUNS.glob("*/validation_heldout.json"))


@pytest.mark.parametrize("run_dir", HELD_OUT, ids=[p.name for p in HELD_OUT])
def test_overheads_measured_on_the_probe_judged_on_the_workloads(run_dir):
    needs_trace_slice(run_dir)
    probes = runs.probes_for(run_dir)
    assert probes and run_dir not in probes, (
        "the terms are judged on runs they were not measured on"
    )
    result, _ = validate(run_dir, overhead_from=probes, repeat=runs.repeat_for(run_dir))
    assert result["step_overhead_s"] > 0  # the probe's measured terms are applied
    assert_committed(result, run_dir / "validation_heldout.json")


MEASURED_TERMS = runs.MEASURED_TERMS
WITH_TERMS = sorted(
    (p.parent, name)
    for name in MEASURED_TERMS
    for p in RUNS.glob(f"*/validation_heldout_{name}.json")
)


@pytest.mark.parametrize(
    ("run_dir", "name"), WITH_TERMS, ids=[f"{p.name}-{n}" for p, n in WITH_TERMS]
)
def test_held_out_with_measured_terms_on(run_dir, name):
    """The same, with measured terms on (engine/runs/validations.py MEASURED_TERMS:
    gpu.shared_page_reads: l2, gpu.ragged_decode: measured, gpu.prefill_batch: measured, or all
    three)."""
    needs_trace_slice(run_dir)
    result, _ = validate(
        run_dir, runs.probes_for(run_dir), MEASURED_TERMS[name], runs.repeat_for(run_dir)
    )
    for field, value in MEASURED_TERMS[name].items():
        assert result[field] == value
    assert_committed(result, run_dir / f"validation_heldout_{name}.json")


WITH_HOST = sorted(p.parent for p in RUNS.glob("*/validation_heldout_all_host.json"))


@pytest.mark.parametrize("run_dir", WITH_HOST, ids=[p.name for p in WITH_HOST])
def test_held_out_with_the_host_speed_replayed(run_dir):
    """All three measured terms, with the host's measured speed replayed (kvsched/host_speed.py;
    runs served since session 11)."""
    needs_trace_slice(run_dir)
    result, _ = validate(
        run_dir,
        runs.probes_for(run_dir),
        MEASURED_TERMS["all"],
        runs.repeat_for(run_dir),
        host_speed=True,
    )
    assert result["host_speed_reference_s"] > 0
    assert_committed(result, run_dir / "validation_heldout_all_host.json")


def assert_committed(result: dict, committed: Path) -> None:
    assert committed.is_file(), f"{committed} is not committed"
    assert_same(result, json.loads(committed.read_text()))


def assert_same(result: dict, committed: dict) -> None:
    """Every committed number as computed now (floats to 1e-6), and no field on one side only.
    Not to the last bit: the shared-reads term's float powers go through libm, whose rounding
    differs between CPUs in the last bits, and a closed-loop simulation carries such a bit into
    its percentiles (a fresh machine recomputed three committed errors 2e-9 to 4e-8 apart)."""
    assert set(result) == set(committed), set(result) ^ set(committed)
    for key, value in committed.items():
        if isinstance(value, float):
            assert result[key] == pytest.approx(value, rel=1e-6, abs=1e-12), key
        elif isinstance(value, dict):  # the repeat's errors
            assert_same(result[key], value)
        elif key != "run":
            assert result[key] == value, key
