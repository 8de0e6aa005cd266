"""Kill a sweep process half way (SIGINT, then SIGTERM), resume it, and get the uninterrupted table."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched.cli import main
from kvsched.sweep import run_sweep
from kvsched.sweep_spec import load_sweep
from kvsched.sweep_store import JOURNAL, _cut_torn_tail


def _journal_ids(out) -> list[str]:
    path = out / JOURNAL
    return (
        [json.loads(line)["point_id"] for line in path.read_text().splitlines()]
        if path.exists()
        else []
    )


def _interrupt(cmd: list[str], out, after_lines: int, sig: int) -> tuple[int, str]:
    """Start the sweep, send `sig` once the journal has `after_lines` points; (exit status, stdout)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while (
        len(_journal_ids(out)) < after_lines and proc.poll() is None and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    proc.send_signal(sig)
    stdout, _ = proc.communicate(timeout=60)
    return proc.returncode, stdout


def test_sigint_then_sigterm_then_resume_equals_an_uninterrupted_run(
    tmp_path, tiny_base, write_sweep
):
    sweep_file = write_sweep(
        {
            "name": "kill",
            "base": {**tiny_base, "duration_s": 3},
            "axes": {"seed": [1, 2, 3, 4], "cache.page_size": [16, 32]},
        }
    )
    out = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "kvsched.cli",
        "sweep",
        sweep_file,
        "--out",
        str(out),
        "--workers",
        "1",
        "--quiet",
        "--no-report",
    ]
    status, stdout = _interrupt(cmd, out, 2, signal.SIGINT)
    done_first = len(_journal_ids(out))
    assert status == 130 and f"interrupted by SIGINT: {done_first} of 8 points done" in stdout, (
        stdout
    )
    assert 2 <= done_first < 8
    assert (
        len(pd.read_csv(out / "sweep.csv")) == done_first
    )  # the table holds what the journal holds

    status, stdout = _interrupt(cmd, out, done_first + 1, signal.SIGTERM)
    done_second = len(_journal_ids(out))
    assert status == 143 and "interrupted by SIGTERM" in stdout, stdout
    assert done_first < done_second < 8

    assert (
        main(["sweep", sweep_file, "--out", str(out), "--workers", "2", "--quiet", "--no-report"])
        == 0
    )
    ids = _journal_ids(out)
    plan = json.loads((out / "sweep.json").read_text())["points"]
    assert len(ids) == len(set(ids)) == 8 and set(ids) == {
        p["point_id"] for p in plan
    }  # none lost or twice
    reference = run_sweep(
        load_sweep(sweep_file), tmp_path / "whole", workers=2, show_progress=False
    )
    resumed = pd.read_csv(out / "sweep.csv").drop(columns=["wall_s"])
    assert resumed.equals(pd.read_csv(tmp_path / "whole" / "sweep.csv").drop(columns=["wall_s"]))
    assert len(reference.table) == 8


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.binary(min_size=1, max_size=20).filter(lambda b: b"\n" not in b), min_size=0, max_size=5
    ),
    st.binary(max_size=20).filter(lambda b: b"\n" not in b),
)
def test_a_torn_last_line_is_cut_and_whole_lines_kept(tmp_path_factory, lines, torn):
    path = tmp_path_factory.mktemp("j") / JOURNAL
    whole = b"".join(line + b"\n" for line in lines)
    path.write_bytes(whole + torn)
    _cut_torn_tail(path)
    assert path.read_bytes() == whole
