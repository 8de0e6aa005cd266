"""Ticks placed once per layout state: the same ticks as matplotlib's, so the same report bytes."""

from __future__ import annotations

import contextlib

import numpy as np

from reports import tick_updates
from reports.figures import log_axis, new_figure, style, svg
from reports.html import write_report
from tests.reports.conftest import make_run


def _labels(ticks) -> list[str]:
    return [t.label1.get_text() for t in ticks]


def test_a_new_state_gets_new_ticks():
    with style():
        fig, axes = new_figure(1, 2, sharey=True)
        ax = axes[0, 0]
        ax.plot([0, 10], [0, 1])
        with tick_updates.memoized():
            first = _labels(ax.xaxis._update_ticks())
            assert _labels(ax.xaxis._update_ticks()) == first  # answered from the memo
            ax.set_xlim(0, 1000)  # new view limits
            wide = _labels(ax.xaxis._update_ticks())
            ax.set_position([0.1, 0.1, 0.1, 0.1])  # a smaller box: fewer ticks fit
            narrow = _labels(ax.xaxis._update_ticks())
            ax.set_xscale("log")  # another scale
            logged = _labels(ax.xaxis._update_ticks())
        assert first != wide != narrow != logged
        assert wide == _labels(_fresh_ticks(1000, None))
        assert narrow == _labels(_fresh_ticks(1000, [0.1, 0.1, 0.1, 0.1]))


def _fresh_ticks(xmax: float, position):
    fig, axes = new_figure(1, 2, sharey=True)
    ax = axes[0, 0]
    ax.plot([0, 10], [0, 1])
    ax.set_xlim(0, xmax)
    if position:
        ax.set_position(position)
    return ax.xaxis._update_ticks()


def test_figure_bytes_do_not_depend_on_the_memo(monkeypatch):
    def figure() -> str:
        fig, axes = new_figure(2, 3, sharex=True, sharey=True)
        for i, ax in enumerate(axes.flat):
            ax.plot(np.arange(50), np.arange(50) ** (1 + i / 3), label=f"line {i}")
            ax.set(title=f"panel {i}", xlabel="x (s)", ylabel="y (count)")
        log_axis(axes[1, 2], "y")
        axes[0, 0].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.suptitle("six panels")
        return svg(fig, "ticks")

    with style():
        memoized = figure()
        monkeypatch.setattr(tick_updates, "memoized", contextlib.nullcontext)
        assert figure() == memoized


def test_report_bytes_do_not_depend_on_the_memo(tmp_path, monkeypatch):
    run = make_run(tmp_path / "steps", record_steps=True, duration_s=4)  # with its Gantt view
    with_memo = write_report([run], tmp_path / "memo.html", workers=1).read_bytes()
    monkeypatch.setattr(tick_updates, "memoized", contextlib.nullcontext)
    without = write_report([run], tmp_path / "plain.html", workers=1).read_bytes()
    assert b'id="fig-gantt-0"' in with_memo
    assert with_memo == without
