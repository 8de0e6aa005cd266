"""`kvsched validate` on damaged engine runs: exit 2 and one line naming the file, line and
field, never a traceback and never a damaged run replayed as a shorter one that agrees."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvsched.cli import main

SOURCE = Path(__file__).resolve().parents[2] / "engine" / "runs" / "multi_turn"


@pytest.fixture
def run_dir(tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(SOURCE, dst)
    return dst


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def damage_steps(run: Path, keep) -> None:
    path = run / "engine" / "steps.csv"
    path.write_text("".join(keep(lines(path))))


def fails_with(run: Path, capsys, *expected: str) -> None:
    assert main(["validate", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for text in expected:
        assert text in err[0], err[0]


def test_steps_cut_mid_row(run_dir, capsys):
    damage_steps(run_dir, lambda ls: ls[:500] + [ls[500][:20]])
    fails_with(run_dir, capsys, "steps.csv line 501", "must be", "got nothing")


def test_steps_cut_at_a_row_boundary(run_dir, capsys):
    damage_steps(run_dir, lambda ls: ls[:58])
    fails_with(run_dir, capsys, "steps.csv", "steps are missing")


def test_header_only_steps(run_dir, capsys):
    damage_steps(run_dir, lambda ls: ls[:1])
    fails_with(run_dir, capsys, "steps.csv", "no rows")


def test_empty_requests(run_dir, capsys):
    (run_dir / "engine" / "requests.csv").write_text("")
    fails_with(run_dir, capsys, "requests.csv", "not a CSV table")


def test_truncated_config(run_dir, capsys):
    path = run_dir / "engine" / "config.json"
    path.write_text(path.read_text()[:100])
    fails_with(run_dir, capsys, "config.json", "not valid JSON")


def test_non_numeric_start(run_dir, capsys):
    damage_steps(run_dir, lambda ls: ls[:3] + [ls[3].replace(",", ",x", 2)] + ls[4:])
    fails_with(run_dir, capsys, "steps.csv line 4", "must be")


def test_request_id_out_of_range(run_dir, capsys):
    path = run_dir / "engine" / "requests.csv"
    ls = lines(path)
    ls[1] = "999999" + ls[1][ls[1].index(",") :]
    path.write_text("".join(ls))
    fails_with(run_dir, capsys, "requests.csv line 2", "request_id must number")


def test_malformed_prefill_chunk(run_dir, capsys):
    damage_steps(run_dir, lambda ls: [ls[0], ls[1].replace("@", "#", 1)] + ls[2:])
    fails_with(run_dir, capsys, "steps.csv line 2", "prefill_chunks")


def test_negative_duration(run_dir, capsys):
    def negate(ls):
        cells = ls[5].split(",")
        cells[3] = "-" + cells[3]
        return ls[:5] + [",".join(cells)] + ls[6:]

    damage_steps(run_dir, negate)
    fails_with(run_dir, capsys, "steps.csv line 6", "duration_s must be a number >= 0")


def test_a_user_file_as_report_is_refused_before_any_output(run_dir, tmp_path, capsys):
    mine = tmp_path / "notes.html"
    mine.write_text("my notes")
    out = tmp_path / "v.json"
    assert main(["validate", str(run_dir), "--json", str(out), "--report", str(mine)]) == 2
    assert "--report" in capsys.readouterr().err
    assert mine.read_text() == "my notes" and not out.exists()


@pytest.mark.parametrize("column", ["sched_s", "plan_s", "loop_s"])
def test_empty_scheduler_time(run_dir, capsys, column):
    """An engine column the overhead fit reads (the scheduler's time, and since round 9 its
    parts) left empty on a line."""

    def blank(ls):
        cells = ls[3].rstrip("\n").split(",")
        cells[ls[0].rstrip("\n").split(",").index(column)] = ""
        return ls[:3] + [",".join(cells) + "\n"] + ls[4:]

    damage_steps(run_dir, blank)
    fails_with(
        run_dir, capsys, "steps.csv line 4", f"{column} must be a number >= 0.0, got nothing"
    )
