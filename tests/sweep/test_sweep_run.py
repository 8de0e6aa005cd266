"""Running sweeps: exact metrics per point, resume, failed points, dead workers, Ray = local."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pandas as pd
import pytest
import yaml

from kvsched.experiment import resolve_arms, run_arm
from kvsched.sweep import run_sweep
from kvsched.sweep_backends import LocalPool
from kvsched.sweep_spec import Point, parse_sweep, point_id
from kvsched.sweep_store import JOURNAL
from sim.config import parse_config


def results(table: pd.DataFrame) -> pd.DataFrame:
    """The table without wall time (the only column that is a measurement of this machine)."""
    return table.drop(columns=["wall_s"])


def journal(out) -> list[dict]:
    return [json.loads(line) for line in (out / JOURNAL).read_text().splitlines()]


def test_local_sweep_metrics_equal_a_direct_run_and_resume_skips_done(tmp_path, tiny_base):
    sweep = parse_sweep({"base": tiny_base, "axes": {"cache.page_size": [16, 64], "seed": [1, 2]}})
    out = tmp_path / "sw"
    first = run_sweep(sweep, out, workers=2, show_progress=False)
    assert (first.num_points, first.num_done, first.num_failed, first.stop_signal) == (
        4,
        4,
        0,
        None,
    )
    table = pd.read_csv(out / "sweep.csv")
    assert list(table.columns[:4]) == ["point", "cache.page_size", "seed", "status"]
    assert table.point.tolist() == [0, 1, 2, 3] and set(table.status) == {"ok"}
    # A point is exactly `kvsched run` of its config: the metrics match a direct simulation.
    point = sweep.points[3]
    _, direct, _, _ = run_arm(parse_config(point.config), point.arm, show_progress=False)
    recorded = next(r for r in journal(out) if r["point_id"] == point.point_id)["metrics"]
    assert recorded == json.loads(json.dumps(direct))
    assert table.loc[3, "completed"] == direct["completed"] > 0
    # Re-running the same sweep simulates nothing and leaves the table unchanged.
    again = run_sweep(sweep, out, workers=2, show_progress=False)
    assert again.num_done == 4 and len(journal(out)) == 4
    assert results(again.table).equals(results(first.table))
    assert pd.read_parquet(out / "sweep.parquet").point.tolist() == [0, 1, 2, 3]


def test_pasted_best_config_runs_as_exactly_that_point(tmp_path, tiny_base):
    from reports.sweep_analysis import load_sweep_dir, pasteable_yaml

    sweep = parse_sweep(
        {"base": tiny_base, "axes": {"policies.routing.name": ["round_robin", "least_loaded"]}}
    )
    out = tmp_path / "sw"
    run_sweep(sweep, out, workers=1, show_progress=False)
    raw = yaml.safe_load(pasteable_yaml(load_sweep_dir(out), 1))
    ((arm, cfg),) = resolve_arms(raw).items()
    assert arm == "engine-tuned" and cfg.policies.routing.name == "least_loaded"
    _, metrics, _, _ = run_arm(cfg, arm, show_progress=False)
    assert (
        json.loads(json.dumps(metrics))
        == next(r for r in journal(out) if r["index"] == 1)["metrics"]
    )


def test_failed_point_is_recorded_and_retried_on_rerun(tmp_path, tiny_base):
    sweep = parse_sweep({"base": tiny_base, "axes": {"seed": [1, 2]}})
    bad_config = {
        **sweep.points[1].config,
        "cache": {**sweep.points[1].config["cache"], "page_size": 3},
    }
    bad = dataclasses.replace(
        sweep.points[1], config=bad_config, point_id=point_id("engine", bad_config)
    )
    broken = dataclasses.replace(sweep, points=[sweep.points[0], bad])
    out = tmp_path / "sw"
    outcome = run_sweep(broken, out, workers=1, show_progress=False)
    assert (outcome.num_done, outcome.num_failed) == (1, 1)
    row = outcome.table.set_index("point").loc[1]
    assert row.status == "failed" and row.error.startswith("ConfigError: point: cache.page_size")
    assert pd.isna(row.completed)
    fixed = run_sweep(sweep, out, workers=1, show_progress=False)
    assert (fixed.num_done, fixed.num_failed) == (2, 0)
    assert [r["status"] for r in journal(out)] == ["ok", "failed", "ok"]


def _task(point: Point) -> dict:
    return {
        "point_id": point.point_id,
        "index": point.index,
        "arm": point.arm,
        "values": point.values,
        "config": point.config,
    }


def test_a_killed_worker_fails_its_point_and_is_replaced(tiny_base):
    long = {
        **tiny_base,
        "duration_s": 600,
        "workload": {"name": "seed", "params": {"num_clients": 64}},
    }
    slow = parse_sweep({"base": long, "axes": {"seed": [1]}}).points[0]
    quick = parse_sweep({"base": tiny_base, "axes": {"seed": [1]}}).points[0]
    pool = LocalPool(1)

    def kill_when_busy():
        while not pool.workers or pool.workers[0].task is None:
            time.sleep(0.05)
        time.sleep(0.5)
        pool.workers[0].process.kill()

    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    try:
        records = list(pool.run([_task(slow), _task(quick)], lambda: False))
    finally:
        killer.join()
        pool.close()
    assert [r["status"] for r in records] == ["failed", "ok"]
    assert records[0]["error"] == "worker process died (exit code -9)"
    assert records[1]["point_id"] == quick.point_id


def test_ray_backend_gives_the_local_table(tmp_path, tiny_base):
    pytest.importorskip("ray")
    sweep = parse_sweep({"base": tiny_base, "axes": {"cache.page_size": [16, 32], "seed": [1, 2]}})
    local = run_sweep(sweep, tmp_path / "local", backend="local", workers=2, show_progress=False)
    ray = run_sweep(sweep, tmp_path / "ray", backend="ray", workers=2, show_progress=False)
    assert ray.num_done == 4
    assert results(ray.table).equals(results(local.table))
    assert (tmp_path / "ray" / "sweep.csv").read_text().count("\n") == 5
