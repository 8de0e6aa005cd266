"""Downsampling keeps what readers look for: every tail point of a CDF, every memory peak."""

from __future__ import annotations

import re
from contextlib import nullcontext

import matplotlib.ticker
import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from matplotlib.figure import Figure

from reports import plots_cluster
from reports.catalog import best_value, fmt
from reports.figures import (
    MAX_CDF_BODY_POINTS,
    _InView,
    bucket_index,
    cdf_points,
    downsample_peak,
    new_figure,
    peak_rows,
    scatter_keep,
    style,
    svg,
)
from reports.plots_cluster import kv_memory_figure, kv_memory_figures
from reports.rundata import load_run

latencies = arrays(np.float64, st.integers(0, 5000), elements=st.floats(0.1, 1e6, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(latencies)
def test_cdf_keeps_the_whole_tail(values):
    x, y = cdf_points(values)
    n = values.size
    assert x.size == y.size <= n
    if n == 0:
        return
    assert x[-1] == values.max() and y[-1] == 1.0  # the slowest request is always drawn
    tail = np.sort(values)[max(0, min(n - 50, int(n * 0.99))) :]
    np.testing.assert_array_equal(x[-tail.size :], tail)  # every point of the top 1% (at least 50)
    assert x.size <= MAX_CDF_BODY_POINTS + tail.size
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0)


def test_cdf_exact_small():
    x, y = cdf_points(np.array([3.0, 1.0, 2.0, np.nan]))
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(y, [1 / 3, 2 / 3, 1.0])


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.integers(1, 4000), elements=st.floats(0, 1e4, allow_nan=False)))
def test_scatter_keeps_every_slow_request(values):
    keep = scatter_keep(values, max_points=300)
    slow = np.flatnonzero(values >= np.percentile(values, 99))
    assert set(slow) <= set(keep.tolist()) or values.size <= 300
    assert np.all(np.diff(keep) > 0)
    assert keep.size <= max(values.size if values.size <= 300 else 0, 300 + slow.size)


def test_downsample_peak_keeps_each_bucket_maximum():
    t = np.arange(1000, dtype=float)
    frame = pd.DataFrame({"time_s": t, "kv": np.sin(t / 7) + (t == 501) * 10.0})
    d = downsample_peak(frame, "kv", max_points=100)
    assert len(d) == 100 and d.kv.max() == frame.kv.max() and 501.0 in d.time_s.to_numpy()
    assert bucket_index(t[:50], 100).tolist() == list(range(50))  # short series: untouched


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 5)), min_size=1, max_size=600),
    st.integers(1, 40),
)
def test_peak_rows_pick_each_buckets_first_peak(samples, max_points):
    """As pandas' idxmax per bucket: the first sample holding the bucket's largest value (ties
    are common in integer byte counts), in bucket order, whatever the order of the times."""
    times = np.array([t for t, _ in samples], dtype=float)
    values = np.array([v for _, v in samples])
    b = bucket_index(times, max_points)
    expected = pd.Series(values).groupby(b).idxmax().to_numpy()
    np.testing.assert_array_equal(peak_rows(times, values, max_points), expected)


def test_kv_figures_drawn_on_one_wiped_figure_equal_new_figures(tiny_run):
    """The arms' KV figures, drawn in turn on one figure, are each byte for byte the figure a
    new one draws (a leftover line, limit or axes position would show)."""
    arms = list(load_run(tiny_run).arms.values())
    with style():
        fresh = [kv_memory_figure(a, f"{i}") for i, a in enumerate(arms)]
        assert kv_memory_figures(arms) == fresh
        assert kv_memory_figures(arms[::-1]) == [
            kv_memory_figure(a, f"{i}") for i, a in enumerate(arms[::-1])
        ]


def test_kv_limits_fitted_once_equal_limits_refitted_per_area(tiny_run, monkeypatch):
    arms = list(load_run(tiny_run).arms.values())
    with style():
        once = kv_memory_figures(arms)
        monkeypatch.setattr(plots_cluster, "limits_fitted_once", lambda axes: nullcontext())
        assert kv_memory_figures(arms) == once


def test_best_value_ignores_ties_in_what_is_shown():
    assert best_value("p99_tpot_ms", [3.51, 3.49, 3.5]) is None  # all show as 3.5
    assert best_value("p99_tpot_ms", [3.5, 4.0, None]) == 3.5
    assert best_value("prefix_hit_rate", [0.1, 0.5]) == 0.5
    assert fmt("peak_kv_bytes", 2.5e11) == "250" and fmt("p99_ttft_ms", None) == "-"


def test_svg_has_no_metadata_and_short_coordinates():
    fig, axes = new_figure()
    ax = axes[0, 0]
    ax.plot([0.123456789, 1.987654321], [2.5, 3.25])
    ax.set(title="t", xlabel="x (s)", ylabel="y (s)")
    text = svg(fig, "k")
    assert text.startswith("<svg") and "<metadata>" not in text
    assert not re.search(r' d="[^"]*\d\.\d{3}', text)


def test_in_view_locator_drops_only_the_ticks_outside_the_view():
    fig = Figure()
    ax = fig.subplots()
    ax.set_xlim(-60, 1260)
    ax.set_yscale("log")
    ax.set_ylim(3, 2000)
    ax.xaxis.set_major_locator(_InView(matplotlib.ticker.MultipleLocator(200)))
    ax.yaxis.set_major_locator(_InView(ax.yaxis.get_major_locator()))
    # The base locators return -200 and 1400, 1 and 10,000 too: a step beyond each end.
    assert ax.xaxis.get_major_locator()().tolist() == [0, 200, 400, 600, 800, 1000, 1200]
    assert ax.yaxis.get_major_locator()().tolist() == [10, 100, 1000]
    ax.set_xlim(0, 1200)  # ends on a tick: kept
    assert ax.xaxis.get_major_locator()().tolist() == [0, 200, 400, 600, 800, 1000, 1200]
