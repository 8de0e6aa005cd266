"""Figure plumbing: matplotlib to inline SVG, one colour per arm, and size-bounded downsampling.

Text stays <text> in the SVG (svg.fonttype none) so plots are small and searchable and the
browser draws them with its own sans-serif font: no font is embedded or fetched.
"""

from __future__ import annotations

import html
import io
import re
from contextlib import contextmanager
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.ticker
import numpy as np
import pandas as pd
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

from reports import text_layout, tick_updates

if TYPE_CHECKING:
    from matplotlib.typing import ColorType

STYLE = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "figure.dpi": 96,
    # Plain numbers on axes: no "1e6" offset label a reader has to multiply in.
    "axes.formatter.useoffset": False,
    "axes.formatter.limits": (-4, 12),
    "axes.formatter.use_locale": False,
    # Titles sit at the top of their axes. Left to None, matplotlib looks for top tick labels to
    # lift each title above, measuring the axes' ticks again at each layout pass and draw (a
    # sixth of the report's CPU), to find none and leave each title where this puts it.
    "axes.titley": 1.0,
}
# Colour-blind-safe palette (Okabe-Ito), then tab10 for runs with many arms.
PALETTE = [
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#F0E442",
    "#000000",
    *matplotlib.color_sequences["tab10"],  # the same RGB tuples as the tab10 colormap
]
MAX_SERIES_POINTS = 240  # points per time-series line: enough for a 1000-px-wide plot
MAX_PANEL_POINTS = 120  # points per line in a small-multiple panel (about 250 px wide)
MAX_CDF_BODY_POINTS = 400  # evenly spaced ranks below the tail; the tail is kept whole
MAX_SCATTER_POINTS = 800  # per arm; the slowest 1% of requests are always kept


def color(i: int) -> ColorType:  # a hex string, or an RGB tuple past the first 8 arms
    return PALETTE[i % len(PALETTE)]


@contextmanager
def style():
    """Context in which all report figures are built and saved: the report's rcParams, and
    text layouts measured once (reports/text_layout.py)."""
    with matplotlib.rc_context(STYLE), text_layout.memoized():
        yield


def new_figure(nrows: int = 1, ncols: int = 1, width: float = 7.5, height: float = 3.2, **kw):
    """(figure, 2-D array of axes). A plain Figure, not pyplot's: nothing to register or close.
    Constrained layout places labels and outside legends within the one draw `svg` makes
    (tight_layout plus a tight bbox would draw every figure three times)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw)


def mpl_label(text: str) -> str:
    """Text from a config or trace, safe for matplotlib: a "$" prints as a dollar instead of
    starting mathtext, and a leading "_" (which hides a legend entry) is kept visible."""
    text = text.replace("$", r"\$")
    return "\u200b" + text if text.startswith("_") else text


def thousands(axis) -> None:
    """Tick labels with thousands separators (3,000,000 rather than 3000000)."""
    axis.set_major_formatter(
        matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}")
    )


def log_axis(ax, which: str) -> None:
    """Log scale with plain tick labels (100, 200, 500, 1,000 ms), readable in any range."""
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = (ax.dataLim.x0, ax.dataLim.x1) if which == "x" else (ax.dataLim.y0, ax.dataLim.y1)
    wide = lo > 0 and np.log10(hi / lo) > 2.5  # labels at 1-2-5 would collide over many decades
    axis.set_major_locator(
        matplotlib.ticker.LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0))
    )
    axis.set_major_formatter(
        matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    )
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _check_labels(fig) -> None:
    """Every plot states what it shows: a title and axis labels (with units, by convention)."""
    shared_x = bool(fig.get_supxlabel()) if hasattr(fig, "get_supxlabel") else False
    shared_y = bool(fig.get_supylabel()) if hasattr(fig, "get_supylabel") else False
    titled = bool(fig._suptitle and fig._suptitle.get_text())
    for ax in fig.axes:
        if not ax.get_visible() or not ax.has_data():
            continue
        assert titled or ax.get_title(), "plot without a title"
        assert shared_x or ax.get_xlabel(), f"plot {ax.get_title()!r} without an x label"
        assert shared_y or ax.get_ylabel(), f"plot {ax.get_title()!r} without a y label"


def svg(fig, key: str) -> str:
    """The figure as an inline <svg> element; `key` salts its element ids so figures never clash."""
    _check_labels(fig)
    _pin_blank_axis_labels(fig)
    _locate_ticks_in_view_only(fig)
    buf = io.StringIO()
    # The SVG canvas's own print draws the figure once, running the layout inside that draw;
    # savefig would first draw it once more (discarding the output) only to run the layout.
    # Same layout, same renderer, same bytes. Ticks are placed once per layout state
    # (reports/tick_updates.py).
    with matplotlib.rc_context({"svg.hashsalt": key}), tick_updates.memoized():
        FigureCanvasSVG(fig).print_svg(buf, metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    # Drop the RDF metadata block: its namespace and resource URIs carry nothing a reader needs.
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)
    return _COORD_ATTR.sub(lambda m: _SIX_DECIMALS.sub(_round2, m.group(0)), text)


def _pin_blank_axis_labels(fig) -> None:
    """Axis labels that are empty or hidden (small multiples, labelled once per figure) get a
    fixed position: matplotlib places an axis label below or beside the tick labels, measuring
    every tick again at each layout pass and draw, and neither draws nor lays out a label with
    no text (about 15% of the small multiples' time; the same page)."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if not (axis.label.get_visible() and axis.label.get_text()):
                axis.set_label_coords(0.5, 0.0)


class _InView(matplotlib.ticker.Locator):
    """Another locator's ticks, less those outside the axis's view. matplotlib builds a tick
    (two lines, two texts, a grid line) for every location a locator returns but draws only
    those in view, and the default locators return a step beyond each end (132 of the 773
    ticks the default study's report built were never drawn). Kept: every tick within the view
    plus a 1e-9 slack (matplotlib's own test, tighter, picks the same ones), so the same ticks
    are drawn with the same labels."""

    def __init__(self, base: matplotlib.ticker.Locator):
        self.base = base

    def __call__(self):
        return self.tick_values(*self.axis.get_view_interval())

    def tick_values(self, vmin, vmax):
        locs = np.asarray(self.base.tick_values(vmin, vmax), dtype=float)
        scale = self.axis.get_transform()  # compare where the ticks land (log axes: log10)
        with np.errstate(invalid="ignore", divide="ignore"):
            lo, hi = sorted(scale.transform(np.array([vmin, vmax], dtype=float)))
            at = scale.transform(locs)
        slack = 1e-9 * (hi - lo)
        return locs[(at >= lo - slack) & (at <= hi + slack)]

    def nonsingular(self, v0, v1):
        return self.base.nonsingular(v0, v1)

    def view_limits(self, vmin, vmax):
        return self.base.view_limits(vmin, vmax)


def _locate_ticks_in_view_only(fig) -> None:
    """Each axis's computed tick locator wrapped in `_InView` (fixed ticks are left alone)."""
    skip = (matplotlib.ticker.FixedLocator, matplotlib.ticker.NullLocator, _InView)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):  # shared axes share their locators: wrapped once
            if not isinstance(major := axis.get_major_locator(), skip):
                axis.set_major_locator(_InView(major))
            if not isinstance(minor := axis.get_minor_locator(), skip):
                axis.set_minor_locator(_InView(minor))


# Coordinates are in points (1/72 inch): two decimals are far below a pixel, and a 1200 s,
# 8-node report is about 40% smaller than with matplotlib's six.
_COORD_ATTR = re.compile(r' (?:d|x|y)="[^"]*"')
_SIX_DECIMALS = re.compile(r"(-?\d+\.\d{2})\d+")


def _round2(m: re.Match) -> str:
    return m.group(1)


def figure_html(fig, key: str, title: str, caption: str) -> str:
    """<figure> with the inline SVG and a one-sentence caption saying what to look at."""
    return (
        f'<figure id="fig-{html.escape(key)}" data-title="{html.escape(title)}">{svg(fig, key)}'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def legend_outside(ax, ncol: int | None = None) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 1.0), ncol=ncol or 1)


# -- downsampling --------------------------------------------------------------------------------
def bucket_index(times: np.ndarray, max_points: int = MAX_SERIES_POINTS) -> np.ndarray:
    """Bucket id per sample so a series keeps at most `max_points` buckets over its time range."""
    unique = np.unique(times)
    if unique.size <= max_points:
        return np.searchsorted(unique, times)
    edges = np.linspace(unique[0], unique[-1], max_points + 1)
    return np.clip(np.searchsorted(edges, times, side="right") - 1, 0, max_points - 1)


def downsample_mean(
    frame: pd.DataFrame, value_cols: list[str], max_points: int = MAX_SERIES_POINTS
) -> pd.DataFrame:
    """Mean per time bucket (queues, load): the level, not single spikes."""
    b = bucket_index(frame.time_s.to_numpy(), max_points)
    return frame[["time_s", *value_cols]].groupby(b).mean().reset_index(drop=True)


def downsample_peak(
    frame: pd.DataFrame, by: str, max_points: int = MAX_SERIES_POINTS
) -> pd.DataFrame:
    """Per time bucket the one sample where `by` peaks (memory): peaks survive, stacks stay consistent."""
    rows = peak_rows(frame.time_s.to_numpy(), frame[by].to_numpy(), max_points)
    return frame.iloc[rows].reset_index(drop=True)


def peak_rows(
    times: np.ndarray, values: np.ndarray, max_points: int = MAX_SERIES_POINTS
) -> np.ndarray:
    """Positions of downsample_peak's samples, bucket by bucket: each bucket's first sample
    holding its largest value (NaN counts as lowest)."""
    if times.size == 0:
        return np.arange(0)
    b = bucket_index(times, max_points)
    order = np.lexsort((-values, b))  # stable: equal peaks stay in sample order
    starts = np.flatnonzero(np.diff(b[order], prepend=-1))
    return order[starts]


def cdf_points(
    values: np.ndarray, tail_share: float = 0.01, min_tail: int = 50
) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, cumulative share) thinned in the body; every point of the tail is kept."""
    x = np.sort(values[np.isfinite(values)])
    n = x.size
    if n == 0:
        return x, x
    y = np.arange(1, n + 1) / n
    tail_start = max(0, min(n - min_tail, int(n * (1 - tail_share))))
    if tail_start <= MAX_CDF_BODY_POINTS:
        return x, y
    body = np.unique(np.linspace(0, tail_start - 1, MAX_CDF_BODY_POINTS).astype(int))
    keep = np.concatenate([body, np.arange(tail_start, n)])
    return x[keep], y[keep]


def scatter_keep(values: np.ndarray, max_points: int = MAX_SCATTER_POINTS) -> np.ndarray:
    """Indices to draw: all points at or above the 99th percentile, an even stride of the rest."""
    n = values.size
    if n <= max_points:
        return np.arange(n)
    cut = np.percentile(values, 99)
    tail = np.flatnonzero(values >= cut)
    rest = np.flatnonzero(values < cut)
    stride = max(1, -(-rest.size // max(1, max_points - tail.size)))
    return np.sort(np.concatenate([rest[::stride], tail]))
