"""`kvsched compare`: two arms or two runs side by side, deltas in the terminal and in HTML."""

from __future__ import annotations

import json

from kvsched.cli import main
from reports.compare import delta_rows, pair_arms, parse_side


def test_two_arms_terminal_table(tiny_run, capsys):
    assert main(["compare", f"{tiny_run}:paged+prefix", f"{tiny_run}:engine"]) == 0
    out = capsys.readouterr().out
    summary = json.loads((tiny_run / "summary.json").read_text())["arms"]
    a, b = summary["paged+prefix"]["prefix_hit_rate"], summary["engine"]["prefix_hit_rate"]
    line = next(x for x in out.splitlines() if x.startswith("prefix hit rate"))
    assert line.split() == [
        "prefix",
        "hit",
        "rate",
        "(%)",
        f"{100 * a:.1f}",
        f"{100 * b:.1f}",
        f"{100 * (b - a):+.1f}",
        "pts",
        f"{(b / a - 1) * 100:+.1f}%",
        "better",
    ]
    assert out.splitlines()[0].split()[:5] == ["metric", "A:", "paged+prefix", "B:", "engine"]


def test_whole_runs_pair_arms_by_name_and_write_html(tiny_run, tmp_path, capsys):
    out = tmp_path / "cmp.html"
    assert main(["compare", str(tiny_run), str(tiny_run), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("metric ") == 3  # one table per arm
    page = out.read_text()
    assert (
        "<script" not in page
        and 'id="fig-cdf-ttft"' in page
        and "A: engine" in page
        and "B: engine" in page
    )


def test_identical_sides_have_zero_deltas(tiny_run):
    pairs = pair_arms(parse_side(f"{tiny_run}:engine", False), parse_side(str(tiny_run), False))
    assert [(a.name, b.name) for a, b in pairs] == [("engine", "engine")]
    assert all(row[5] == 0 for row in delta_rows(*pairs[0]))


def test_unknown_arm_exits_2(tiny_run, capsys):
    assert main(["compare", f"{tiny_run}:nope", str(tiny_run)]) == 2
    err = capsys.readouterr().err
    assert "unknown arm 'nope'" in err and "allowed: openclaw, paged+prefix, engine" in err
