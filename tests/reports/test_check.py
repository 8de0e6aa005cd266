"""`kvsched check`: unchanged run passes, a worse policy fails naming metrics, bad input exits 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from kvsched.cli import main
from kvsched.experiment import BUILTIN_ARMS
from reports.check import DEFAULT_TOLERANCES, compare_metric
from tests.reports.conftest import make_run

ROUND_ROBIN = {"policies": {"routing": {"name": "round_robin", "params": {}}}}


@pytest.fixture(scope="module")
def baseline(tiny_run, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("baseline") / "seed.json"
    assert main(["check", str(tiny_run), "--baseline", str(path), "--update"]) == 0
    return path


def test_unchanged_run_passes(tiny_run, baseline, capsys):
    assert main(["check", str(tiny_run), "--baseline", str(baseline)]) == 0
    assert "ok: every metric within tolerance" in capsys.readouterr().out


def test_rerun_is_identical_and_passes(baseline, tmp_path, tiny_run, capsys):
    """Same config and seed: byte-identical summary, so the gate passes on a fresh run."""
    arms = json.loads((tiny_run / "config.json").read_text())["arms"]
    again = make_run(tmp_path / "again", arms=arms)
    assert (again / "summary.json").read_bytes() == (tiny_run / "summary.json").read_bytes()
    assert main(["check", str(again), "--baseline", str(baseline)]) == 0


def test_round_robin_engine_fails_naming_metrics(baseline, tmp_path, tiny_run, capsys):
    arms = json.loads((tiny_run / "config.json").read_text())["arms"]
    worse = make_run(tmp_path / "worse", arms={**arms, "engine": ROUND_ROBIN})
    capsys.readouterr()
    assert main(["check", str(worse), "--baseline", str(baseline)]) == 1
    out = capsys.readouterr().out
    regressions = [line for line in out.splitlines() if "REGRESSION" in line]
    assert regressions and all(" engine " in line for line in regressions)  # only the changed arm
    hit = next(line for line in regressions if "prefix_hit_rate" in line)
    was = json.loads((tiny_run / "summary.json").read_text())["arms"]["engine"]["prefix_hit_rate"]
    now = json.loads((worse / "summary.json").read_text())["arms"]["engine"]["prefix_hit_rate"]
    assert now < was - 0.2  # cache-blind routing: every node must hold every group, and evicts
    assert (
        f"{100 * was:.1f}% -> {100 * now:.1f}% ({100 * (now - was):+.1f} pts; tolerance 2.0 pts)"
        in hit
    )
    assert any("p99_ttft_ms" in line and "tolerance 10.0%" in line for line in regressions)
    assert "policies.routing.name: 'prefix_affinity' -> 'round_robin'" in out
    assert "FAIL:" in out


def test_update_keeps_hand_tuned_tolerances(tiny_run, baseline, tmp_path):
    path = tmp_path / "b.json"
    data = json.loads(baseline.read_text())
    data["arms"]["engine"]["tolerances"]["prefix_hit_rate"] = {"abs": 0.5}
    path.write_text(json.dumps(data))
    assert main(["check", str(tiny_run), "--baseline", str(path), "--update"]) == 0
    rewritten = json.loads(path.read_text())
    assert rewritten["arms"]["engine"]["tolerances"]["prefix_hit_rate"] == {"abs": 0.5}
    assert (
        rewritten["arms"]["openclaw"]["tolerances"]["prefix_hit_rate"]
        == DEFAULT_TOLERANCES["prefix_hit_rate"]
    )


@pytest.mark.parametrize(
    "damage, message",
    [
        ("no-baseline", "no such file"),
        ("no-summary", "no such file"),
        ("extra-arm", "unknown arm(s) extra"),
        ("missing-arm", "in the baseline but not in the run"),
        ("bad-tolerance", "tolerances.p99_ttft_ms must be"),
        ("not-json", "is not valid JSON"),
    ],
)
def test_unusable_input_exits_2(tiny_run, baseline, tmp_path, capsys, damage, message):
    run, base = tmp_path / "run", tmp_path / "b.json"
    shutil.copytree(tiny_run, run)
    data = json.loads(baseline.read_text())
    summary = json.loads((run / "summary.json").read_text())
    if damage == "no-baseline":
        base = tmp_path / "missing.json"
    elif damage == "no-summary":
        (run / "summary.json").unlink()
    elif damage == "extra-arm":
        summary["arms"]["extra"] = summary["arms"]["engine"]
    elif damage == "missing-arm":
        del summary["arms"]["engine"]
    elif damage == "bad-tolerance":
        data["arms"]["engine"]["tolerances"]["p99_ttft_ms"] = {"rel": -1}
    (run / "summary.json").exists() and (run / "summary.json").write_text(json.dumps(summary))
    if damage != "no-baseline":
        base.write_text("{not json" if damage == "not-json" else json.dumps(data))
    assert main(["check", str(run), "--baseline", str(base)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_tolerance_directions():
    """Worse beyond tolerance regresses; better or within never does; the boundary passes."""
    tol_rel, tol_abs = {"rel": 0.10}, {"abs": 0.02}
    assert compare_metric("a", "p99_ttft_ms", 100.0, 110.0, tol_rel).regressed is False
    assert compare_metric("a", "p99_ttft_ms", 100.0, 110.5, tol_rel).regressed is True
    assert compare_metric("a", "p99_ttft_ms", 100.0, 50.0, tol_rel).improved is True
    assert compare_metric("a", "prefix_hit_rate", 0.50, 0.48, tol_abs).regressed is False
    assert compare_metric("a", "prefix_hit_rate", 0.50, 0.47, tol_abs).regressed is True
    assert compare_metric("a", "output_throughput", 1000.0, 940.0, {"rel": 0.05}).regressed is True
    assert (
        compare_metric("a", "p99_ttft_ms", 100.0, None, tol_rel).regressed is True
    )  # nothing finished


def test_committed_baseline_covers_the_ci_study():
    """baselines/seed.json gates every arm the CI study runs, with the default metrics."""
    root = Path(__file__).resolve().parents[2]
    study = yaml.safe_load((root / "baselines" / "seed_study.yaml").read_text())
    baseline = json.loads((root / "baselines" / "seed.json").read_text())
    arms = list(study.get("arms") or BUILTIN_ARMS)
    assert list(baseline["arms"]) == arms
    for entry in baseline["arms"].values():
        assert set(entry["metrics"]) == set(DEFAULT_TOLERANCES) == set(entry["tolerances"])
