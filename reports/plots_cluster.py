"""Cluster plots from timeseries.csv and requests.csv: KV memory, queues, hit rate, node load.

Every column beyond time_s/node is optional here: a plot whose columns an arm lacks skips that
arm, and a plot no arm can feed is left out (the caller shows a note instead).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from reports.figures import (
    MAX_PANEL_POINTS,
    color,
    downsample_mean,
    figure_html,
    legend_outside,
    mpl_label,
    new_figure,
    peak_rows,
    thousands,
)
from reports.panels import PanelGrid, limits_fitted_once, panel_grid
from reports.rundata import Arm

GB = 1e9
# Stacked KV layers: (label, column or (minuend, subtrahend), colour). Allocated is split into the
# bytes holding real tokens and the idle rest (contiguous: the reserved tail; paged: last-page slots).
KV_LAYERS = [
    ("live tokens", "kv_live_bytes", "#0072B2"),
    ("allocated, idle", ("kv_allocated_bytes", "kv_live_bytes"), "#56B4E9"),
    ("cached, free (reusable)", "kv_cached_bytes", "#009E73"),
    ("retired (awaiting epoch)", "kv_retired_bytes", "#CC79A7"),
]


def _has(frame: pd.DataFrame | None, *cols: str) -> bool:
    return frame is not None and all(c in frame.columns for c in cols)


def _layer(frame: pd.DataFrame, spec) -> np.ndarray | None:
    if isinstance(spec, tuple):
        return (
            (frame[spec[0]] - frame[spec[1]]).clip(lower=0).to_numpy() / GB
            if _has(frame, *spec)
            else None
        )
    return frame[spec].to_numpy() / GB if _has(frame, spec) else None


def kv_memory_figures(arms: list[Arm]) -> list[str | None]:
    """Every arm's KV memory figure (None where an arm has no KV samples); arms with as many
    nodes are drawn in turn on one panel grid (reports/panels.py: a quarter of these figures'
    time was building their axes and ticks)."""
    grids: dict[int, PanelGrid] = {}
    return [kv_memory_figure(a, f"{i}", grids) for i, a in enumerate(arms)]


def kv_memory_figure(arm: Arm, key: str, grids: dict[int, PanelGrid] | None = None) -> str | None:
    """One panel per node: stacked KV bytes, fragmentation, allocator pool and the physical limit."""
    s = arm.series_rows
    if not _has(s, "kv_allocated_bytes"):
        return None
    nodes = sorted(s.node.unique())
    fig, axes = panel_grid(len(nodes), {} if grids is None else grids)
    held = [
        c for c in ("kv_allocated_bytes", "kv_cached_bytes", "kv_retired_bytes") if c in s.columns
    ]
    times, node_ids = s.time_s.to_numpy(), s.node.to_numpy()
    held_bytes = s[held].sum(axis=1).to_numpy()  # what each node's peak sample is chosen by
    with limits_fitted_once(axes):
        for ax, node in zip(axes.flat, nodes, strict=False):
            rows = np.flatnonzero(node_ids == node)
            rows = rows[peak_rows(times[rows], held_bytes[rows], MAX_PANEL_POINTS)]
            _kv_panel(ax, s.iloc[rows].reset_index(drop=True))
            ax.set_title(f"node {node}", fontsize=8)
    legend_outside(axes[0, -1])
    fig.suptitle(mpl_label(f"KV memory over time per node: {arm.label}"))
    fig.supxlabel("simulated time (s)")
    fig.supylabel("KV memory (GB)")
    caption = (
        "Dark blue is memory holding real tokens, light blue is held but idle, green is reusable "
        "cache; a stack touching the dash-dotted physical limit means the next allocation must "
        "evict, preempt or fail (each point is the peak sample of its time bucket)."
    )
    return figure_html(fig, f"kv-{key}", f"KV memory over time: {arm.label}", caption)


def _kv_panel(ax, f: pd.DataFrame) -> None:
    """One node's panel from its (downsampled) samples `f`."""
    layers = [(label, _layer(f, spec), c) for label, spec, c in KV_LAYERS]
    layers = [x for x in layers if x[1] is not None]
    if not _has(f, "kv_live_bytes"):
        layers.insert(0, ("allocated", f.kv_allocated_bytes.to_numpy() / GB, "#0072B2"))
    ax.stackplot(
        f.time_s,
        *[v for _, v, _ in layers],
        labels=[lb for lb, _, _ in layers],
        colors=[c for _, _, c in layers],
        lw=0,
    )
    if _has(f, "kv_fragmentation_bytes"):
        ax.plot(
            f.time_s,
            f.kv_fragmentation_bytes / GB,
            color="#E69F00",
            lw=1,
            label="fragmentation",
        )
    if (
        _has(f, "kv_pool_bytes", "kv_capacity_bytes")
        and (f.kv_pool_bytes != f.kv_capacity_bytes).any()
    ):
        ax.plot(
            f.time_s,
            f.kv_pool_bytes / GB,
            color="#555",
            lw=0.9,
            ls="--",
            label="allocator pool",
        )
    if _has(f, "kv_capacity_bytes"):
        ax.axhline(
            f.kv_capacity_bytes.max() / GB,
            color="#D55E00",
            lw=1.1,
            ls="-.",
            label="physical limit",
        )


def queue_figure(arms: list[Arm]) -> str | None:
    usable = [(i, a) for i, a in enumerate(arms) if _has(a.series, "waiting")]
    if not usable:
        return None
    fig, axes = new_figure(1, 2, width=10.5, height=3.2, sharex=True)
    for col, ax, what in [
        ("waiting", axes[0, 0], "queued (waiting)"),
        ("running", axes[0, 1], "in the batch (running)"),
    ]:
        for i, arm in usable:
            if _has(arm.series, col):
                total = arm.series_rows.groupby("time_s", as_index=False)[col].sum()
                d = downsample_mean(total, [col])
                ax.plot(d.time_s, d[col], color=color(i), lw=1.2, label=mpl_label(arm.label))
        ax.set(
            title=f"Requests {what}, all nodes",
            xlabel="simulated time (s)",
            ylabel="requests (count)",
        )
    legend_outside(axes[0, 1])
    caption = (
        "A queue that keeps growing means the arm serves slower than clients send; it is where "
        "TTFT goes (mean per time bucket, summed over nodes)."
    )
    return figure_html(fig, "queue", "Queue length over time", caption)


NICE_WINDOWS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)


def _window_s(arms: list[Arm]) -> float:
    """A round window giving about 40 points over the run (fewer for very long runs)."""
    end = max(
        float(a.request_rows.finish_s.max()) for a in arms if a.request_rows.finish_s.notna().any()
    )
    return next((w for w in NICE_WINDOWS_S if w >= end / 40), NICE_WINDOWS_S[-1])


def hit_rate_figure(arms: list[Arm]) -> str | None:
    usable = [
        (i, a)
        for i, a in enumerate(arms)
        if _has(a.requests, "cached_tokens") and a.request_rows.finish_s.notna().any()
    ]
    if not usable:
        return None
    window = _window_s([a for _, a in usable])
    fig, axes = new_figure(width=7.5, height=3.2)
    ax = axes[0, 0]
    for i, arm in usable:
        r = arm.request_rows[arm.request_rows.status != "failed"].dropna(subset=["finish_s"])
        b = (r.finish_s // window).astype(int)
        g = r.assign(_b=b).groupby("_b")[["cached_tokens", "prompt_tokens"]].sum()
        rate = 100 * g.cached_tokens / g.prompt_tokens.where(g.prompt_tokens > 0)
        ax.plot(
            (g.index + 0.5) * window,
            rate,
            color=color(i),
            lw=1.3,
            marker=".",
            ms=3,
            label=mpl_label(arm.label),
        )
    ax.set(
        title="Prefix hit rate over time",
        xlabel="simulated time at request finish (s)",
        ylabel="prompt tokens from cache (%)",
        ylim=(-2, 102),
    )
    legend_outside(ax)
    caption = (
        f"Share of prompt tokens served from the prefix cache, per {window:g} s window of "
        f"finishing requests; a falling line means the cache is losing its hot prefixes."
    )
    return figure_html(fig, "hit-rate", "Prefix hit rate over time", caption)


def node_load_figure(arms: list[Arm]) -> str | None:
    usable = [a for a in arms if _has(a.series, "load")]
    if not usable:
        return None
    ncols = min(3, len(usable))
    nrows = math.ceil(len(usable) / ncols)
    fig, axes = new_figure(
        nrows, ncols, width=3.3 * ncols + 1.4, height=2.3 * nrows + 0.6, sharex=True, sharey=True
    )
    for ax, arm in zip(axes.flat, usable, strict=False):
        for node, f in arm.series_rows.groupby("node"):
            d = downsample_mean(f, ["load"], MAX_PANEL_POINTS)
            ax.plot(d.time_s, d.load * 100, lw=0.9, color=color(int(node)), label=f"node {node}")
        ax.set_title(mpl_label(arm.label), fontsize=8)
    for ax in list(axes.flat)[len(usable) :]:
        ax.set_visible(False)
    legend_outside(axes[0, -1])
    fig.suptitle("Per-node load over time")
    fig.supxlabel("simulated time (s)")
    fig.supylabel("node load (% of KV capacity demanded)")
    caption = (
        "One line per node: lines that stay apart mean the router keeps some nodes hot and others "
        "idle; load = KV held plus queued prompt tokens over capacity (mean per time bucket)."
    )
    return figure_html(fig, "node-load", "Per-node load over time", caption)


def requests_per_node_figure(arms: list[Arm]) -> str | None:
    usable = [
        (i, a)
        for i, a in enumerate(arms)
        if _has(a.requests, "node") and a.request_rows.node.notna().any()
    ]
    nodes = sorted({int(n) for _, a in usable for n in a.request_rows.node.dropna().unique()})
    if len(nodes) < 2:
        return None
    fig, axes = new_figure(width=7.5, height=3.2)
    ax = axes[0, 0]
    width = 0.8 / len(usable)
    for k, (i, arm) in enumerate(usable):
        counts = (
            arm.request_rows.node.dropna().astype(int).value_counts().reindex(nodes, fill_value=0)
        )
        imbalance = counts.max() / counts.mean() if counts.mean() else float("nan")
        ax.bar(
            np.arange(len(nodes)) + (k - (len(usable) - 1) / 2) * width,
            counts.to_numpy(),
            width,
            color=color(i),
            label=mpl_label(f"{arm.label} (max/mean {imbalance:.2f})"),
        )
    ax.set_xticks(range(len(nodes)), [str(n) for n in nodes])
    ax.set(title="Requests routed per node", xlabel="node (id)", ylabel="requests routed (count)")
    thousands(ax.yaxis)
    legend_outside(ax)
    caption = (
        "Equal bars mean the router spreads work evenly; one tall bar is a hot-spot node (the "
        "legend gives each arm's max/mean ratio)."
    )
    return figure_html(fig, "requests-per-node", "Requests routed per node", caption)
