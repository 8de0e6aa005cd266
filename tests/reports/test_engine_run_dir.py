"""Reports and timelines read an engine run directory (kvsched engine run) as a simulated one.
Runs written before the engine sampled a time series (round 3) still report: every section the
files allow, and a line saying which need the samples."""

from __future__ import annotations

import json
from pathlib import Path

from kvsched.cli import main

RUNS = Path(__file__).resolve().parents[2] / "engine" / "runs"
RUN = RUNS / "multi_turn"
BEFORE_SERIES = RUNS / "round3" / "multi_turn"


def test_report_of_an_engine_run(tmp_path):
    assert (RUN / "engine" / "timeseries.csv").exists()
    out = tmp_path / "report.html"
    assert main(["report", str(RUN), "--out", str(out)]) == 0
    html = out.read_text()
    assert "No arm recorded KV memory" not in html and "<svg" in html


def test_report_of_an_engine_run_without_a_time_series(tmp_path):
    assert not (BEFORE_SERIES / "engine" / "timeseries.csv").exists()
    out = tmp_path / "report.html"
    assert main(["report", str(BEFORE_SERIES), "--out", str(out)]) == 0
    html = out.read_text()
    assert "No arm recorded KV memory" in html and "<svg" in html


def test_timeline_of_an_engine_run(tmp_path):
    out = tmp_path / "timeline.json"
    assert main(["timeline", str(RUN), "--out", str(out)]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and e.get("cat") == "step"]
    assert len(steps) == 1017  # every measured step of the run
