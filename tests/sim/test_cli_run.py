"""`kvsched run` end to end on a tiny config: outputs, determinism, and bad input."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from kvsched.cli import main
from sim.metrics import REQUEST_COLUMNS


def write_config(tmp_path, data) -> str:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def run(tmp_path, cfg, out="run", extra=()):
    return main(
        [
            "run",
            "--config",
            write_config(tmp_path, cfg),
            "--out",
            str(tmp_path / out),
            "--quiet",
            "--no-report",
            *extra,
        ]
    )


def test_run_writes_every_output_and_all_builtin_arms(tmp_path, tiny_config):
    assert run(tmp_path, tiny_config) == 0
    out = tmp_path / "run"
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["arms"]) == [
        "openclaw",
        "paged",
        "paged+prefix",
        "engine",
        "engine+cascade",
    ]
    for arm, metrics in summary["arms"].items():
        for key in (
            "request_throughput",
            "output_throughput",
            "total_token_throughput",
            "mean_ttft_ms",
            "p50_ttft_ms",
            "p99_ttft_ms",
            "mean_tpot_ms",
            "p99_tpot_ms",
            "p99_e2el_ms",
            "prefix_hit_rate",
            "peak_kv_bytes",
            "kv_utilization",
            "oom_events",
            "preemptions",
            "completed",
            "failed",
        ):
            assert key in metrics, (arm, key)
        requests = pd.read_csv(out / arm / "requests.csv")
        assert list(requests.columns[: len(REQUEST_COLUMNS)]) == REQUEST_COLUMNS
        assert metrics["completed"] == int((requests.status == "finished").sum()) > 0
    assert summary["arms"]["openclaw"]["prefix_hit_rate"] == 0.0
    assert summary["arms"]["engine"]["prefix_hit_rate"] > 0.0
    assert json.loads((out / "config.json").read_text())["name"] == "tiny"


def test_same_config_and_seed_give_byte_identical_results(tmp_path, tiny_config):
    assert run(tmp_path, tiny_config, "a") == 0
    assert run(tmp_path, tiny_config, "b") == 0
    for name in ["summary.json", "engine/requests.csv", "openclaw/timeseries.csv"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_arms_flag_selects_arms(tmp_path, tiny_config):
    assert run(tmp_path, tiny_config, extra=["--arms", "engine"]) == 0
    assert list(json.loads((tmp_path / "run" / "summary.json").read_text())["arms"]) == ["engine"]


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"bogus_field": 1}, "bogus_field"),
        ({"duration_s": "soon"}, "duration_s"),
        ({"workload": {"name": "seed", "params": {"input_min": -4}}}, "workload.params.input_min"),
        ({"policies": {"routing": {"name": "telepathy"}}}, "policies.routing.name"),
        ({"arms": {"x": {"cache": {"page_size": 3}}}}, "arms.x: cache.page_size"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_run_dir(
    tmp_path, tiny_config, capsys, patch, needle
):
    assert run(tmp_path, {**tiny_config, **patch}) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "run.partial").exists()


def test_unknown_arm_and_missing_config_exit_2(tmp_path, tiny_config, capsys):
    assert run(tmp_path, tiny_config, extra=["--arms", "nope"]) == 2
    assert "unknown arm 'nope'" in capsys.readouterr().err
    assert main(["run", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert main(["run", "--duration", "abc"]) == 2


def test_out_must_be_new_empty_or_an_earlier_run(tmp_path, tiny_config, capsys):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keep.txt").write_text("mine")
    cfg = write_config(tmp_path, tiny_config)
    assert main(["run", "--config", cfg, "--out", str(notes), "--quiet", "--no-report"]) == 2
    assert "is not a kvsched run directory" in capsys.readouterr().err
    assert (notes / "keep.txt").read_text() == "mine"
    assert run(tmp_path, tiny_config, extra=["--arms", "engine"]) == 0
    assert run(tmp_path, tiny_config, extra=["--arms", "paged"]) == 0  # an earlier run is replaced
    assert list(json.loads((tmp_path / "run" / "summary.json").read_text())["arms"]) == ["paged"]


def test_a_closed_loop_whose_requests_never_fit_stops_with_one_line(tmp_path, tiny_config, capsys):
    cfg = {
        **tiny_config,
        "node": {"num_gpus": 1, "tp": 1, "kv_memory_fraction": 0.12},
        "workload": {
            "name": "seed",
            "params": {
                "num_clients": 2,
                "input_min": 100000,
                "input_max": 100000,
                "long_share": 0.0,
            },
        },
    }
    assert run(tmp_path, cfg, extra=["--arms", "engine"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "can never fit one node" in err
