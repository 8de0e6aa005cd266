"""Memoized text layouts: the same layouts as matplotlib's, so the same report bytes."""

from __future__ import annotations

import contextlib

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from reports import text_layout
from reports.figures import STYLE
from reports.html import write_report


def _texts(fig: Figure) -> list[Text]:
    ax = fig.subplots()
    ax.set(title="TTFT CDF per arm", xlabel="time to first token (ms)", ylabel="share")
    return [
        ax.title,
        ax.xaxis.label,
        ax.yaxis.label,
        ax.text(0.1, 0.2, "two\nlines", ha="right", va="top", multialignment="center"),
        ax.text(0.3, 0.4, "rotated", rotation=20, ha="right", rotation_mode="anchor"),
        ax.text(0.5, 0.6, r"$\alpha$ math", fontsize=7, va="baseline"),
        ax.text(0.7, 0.8, "wrapped " * 30, wrap=True),
        ax.text(0.2, 0.9, "spaced\nout", linespacing=2.0, fontweight="bold"),
        # One string, each time with one property changed: each needs its own layout.
        *(
            ax.text(0.5, 0.5, "1,000\n2", **props)
            for props in [
                {},
                {"ha": "right"},
                {"va": "top"},
                {"rotation": 30},
                {"rotation": 30, "rotation_mode": "anchor"},
                {"fontsize": 12},
                {"fontweight": "bold"},
                {"multialignment": "right"},
                {"linespacing": 1.5},
            ]
        ),
    ]


def test_layouts_are_matplotlibs_and_the_method_is_restored():
    with matplotlib.rc_context(STYLE):
        fig = Figure()
        texts = _texts(fig)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()  # a wrapped text measures itself against the drawn figure
        renderer = canvas.get_renderer()
        expected = [repr(t._get_layout(renderer)) for t in texts]
        with text_layout.memoized(), text_layout.memoized():  # reentrant
            first = [repr(t._get_layout(renderer)) for t in texts]
            texts[1].set_fontsize(20)  # a new font size is a new key, not a stale layout
            resized = repr(texts[1]._get_layout(renderer))
            again = [repr(t._get_layout(renderer)) for t in texts]
        assert Text._get_layout is text_layout._measure
        assert first == expected
        assert resized == repr(texts[1]._get_layout(renderer)) != expected[1]
        assert again[:1] + again[2:] == expected[:1] + expected[2:]


def test_report_bytes_do_not_depend_on_the_memo(tiny_run, tmp_path, monkeypatch):
    with_memo = write_report([tiny_run], tmp_path / "memo.html", workers=1).read_bytes()
    monkeypatch.setattr(text_layout, "memoized", contextlib.nullcontext)
    without = write_report([tiny_run], tmp_path / "plain.html", workers=1).read_bytes()
    assert with_memo == without
