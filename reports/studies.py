"""Study-specific report sections, shown only when a run carries their metrics.

A section appears when any arm has one of its summary keys, request columns or series columns
with a nonzero value; features that add metrics get their plots by name, with no report change.
Series columns nobody declared still get plotted under "Other time series".
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from reports.catalog import header, metric, number
from reports.figures import (
    color,
    downsample_mean,
    figure_html,
    legend_outside,
    mpl_label,
    new_figure,
    thousands,
)
from reports.rundata import Arm
from sim.metrics import SERIES_COLUMNS


@dataclass(frozen=True)
class Study:
    key: str
    title: str
    intro: str  # one sentence: what the section is for and what good looks like
    summary_keys: tuple[str, ...] = ()
    request_columns: tuple[str, ...] = ()  # per-request counts, plotted cumulative by finish time
    series_columns: tuple[str, ...] = ()  # per-node samples, plotted summed over nodes


STUDIES = [
    Study(
        "false-hits",
        "Hash false hits (pitfall 1)",
        "A short-hash match whose tokens differ is a false hit; with the level-2 exact compare it is "
        "caught, without it the request reuses someone else's KV (wrong-reuse tokens must be 0).",
        ("false_hits", "wrong_reuse_tokens"),
        ("false_hits", "wrong_reuse_tokens"),
    ),
    Study(
        "eviction",
        "Eviction, admission and the protected zone (pitfall 2)",
        "Evictions that hit long shared prefixes force re-prefill; scored eviction and the protected "
        "zone should keep them resident (compare the hit rate and P99 TTFT per request class above).",
        (
            "evicted_pages",
            "protected_pages",
            "admission_rejected_tokens",
            "internal_fragmentation_bytes",
        ),
        (),
        ("evicted_pages", "protected_pages"),
    ),
    Study(
        "reclaim",
        "Reference counts and reclamation (pitfall 3)",
        "A page freed while a reader still uses it is a use-after-free (must be 0 with epoch "
        "reclamation); the price of the fix is the retired memory held until the batch ends.",
        ("use_after_free",),
        ("use_after_free",),
        ("use_after_free", "kv_retired_bytes"),
    ),
    Study(
        "routing",
        "Routing balance",
        "Cache-aware routing concentrates a prefix on few nodes; the load fallback should keep the "
        "hottest node near the mean (max/mean close to 1).",
        ("load_imbalance", "router_queue_ms", "p99_router_queue_ms"),
        (),
        (),
    ),
    Study(
        "network",
        "Cross-node KV transfers",
        "Remote pages cost network time before the step that reads them; batched and RDMA transfers "
        "should approach the link's bandwidth bound.",
        ("network_bytes", "network_messages", "remote_pages", "link_utilization"),
        (),
        ("network_bytes", "link_utilization"),
    ),
]


def _nonzero(values) -> bool:
    return any((v := number(x)) is not None and v != 0 for x in values)


def _present_keys(arms: list[Arm], keys) -> list[str]:
    return [k for k in keys if _nonzero(a.metrics.get(k) for a in arms)]


def _present_columns(arms: list[Arm], cols, frame: str) -> list[str]:
    out = []
    for c in cols:
        frames = [getattr(a, frame) for a in arms]
        if any(f is not None and c in f.columns and (f[c].fillna(0) != 0).any() for f in frames):
            out.append(c)
    return out


def _bars(arms: list[Arm], keys: list[str], title: str, fig_key: str) -> str:
    fig, axes = new_figure(1, len(keys), width=min(11, max(6.0, 3.2 * len(keys) + 1)), height=3.0)
    for ax, key in zip(axes[0], keys, strict=True):
        m = metric(key)
        vals = [(number(a.metrics.get(key)) or 0.0) * m.scale for a in arms]
        ax.bar(range(len(arms)), vals, color=[color(i) for i in range(len(arms))])
        for i, v in enumerate(vals):
            ax.text(
                i,
                v,
                f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}",
                ha="center",
                va="bottom",
                fontsize=7,
            )
        ax.set_xticks(range(len(arms)), [mpl_label(a.label) for a in arms], rotation=20, ha="right")
        ax.set(title=m.label, xlabel="arm", ylabel=header(key) if m.unit else f"{m.label} (count)")
        thousands(ax.yaxis)
    fig.suptitle(title)
    return figure_html(
        fig,
        fig_key,
        title,
        "One bar per arm, from summary.json: put the arm that shows the problem next to the arm that fixes it.",
    )


def _cumulative(arms: list[Arm], cols: list[str], title: str, fig_key: str) -> str:
    fig, axes = new_figure(1, len(cols), width=min(11, max(6.0, 3.6 * len(cols) + 1.5)), height=3.0)
    for ax, col in zip(axes[0], cols, strict=True):
        for i, a in enumerate(arms):
            r = a.request_rows
            if col in r.columns:
                r = r.dropna(subset=["finish_s"]).sort_values("finish_s")
                ax.step(
                    r.finish_s,
                    r[col].fillna(0).cumsum(),
                    where="post",
                    color=color(i),
                    label=mpl_label(a.label),
                )
        ax.set(
            title=metric(col).label,
            xlabel="simulated time at request finish (s)",
            ylabel=f"cumulative {metric(col).label} (count)",
        )
        thousands(ax.yaxis)
    legend_outside(axes[0, -1])
    fig.suptitle(title)
    return figure_html(
        fig,
        fig_key,
        title,
        "Cumulative count over the run: a line that keeps rising is a problem that keeps happening.",
    )


def series_figure(arms: list[Arm], cols: list[str], title: str, fig_key: str, caption: str) -> str:
    fig, axes = new_figure(1, len(cols), width=min(11, max(6.0, 3.6 * len(cols) + 1.5)), height=3.0)
    for ax, col in zip(axes[0], cols, strict=True):
        bytes_col = col.endswith("_bytes")
        for i, a in enumerate(arms):
            if a.series is None or col not in a.series.columns:
                continue
            total = a.series.groupby("time_s", as_index=False)[col].sum()
            d = downsample_mean(total, [col])
            ax.plot(
                d.time_s,
                d[col] / (1e9 if bytes_col else 1),
                color=color(i),
                lw=1.1,
                label=mpl_label(a.label),
            )
        unit = "GB" if bytes_col else "value"
        ax.set(
            title=col.replace("_", " "),
            xlabel="simulated time (s)",
            ylabel=f"{col.removesuffix('_bytes').replace('_', ' ')}, all nodes ({unit})",
        )
    legend_outside(axes[0, -1])
    fig.suptitle(title)
    return figure_html(fig, fig_key, title, caption)


def study_sections(arms: list[Arm]) -> list[tuple[str, str, str]]:
    """(anchor, title, body html) for each study whose metrics this run carries."""
    out = []
    for st in STUDIES:
        keys = _present_keys(arms, st.summary_keys)
        req_cols = _present_columns(arms, st.request_columns, "requests")
        ser_cols = _present_columns(arms, st.series_columns, "series")
        if not (keys or req_cols or (ser_cols and set(ser_cols) - set(SERIES_COLUMNS))):
            continue  # a standard column alone (e.g. retired bytes) does not make a study
        body = [f"<p>{html.escape(st.intro)}</p>"]
        if keys:
            body.append(_bars(arms, keys, f"{st.title}: per arm", f"study-{st.key}-bars"))
        if req_cols:
            body.append(
                _cumulative(arms, req_cols, f"{st.title}: over time", f"study-{st.key}-cum")
            )
        if ser_cols:
            body.append(
                series_figure(
                    arms,
                    ser_cols,
                    f"{st.title}: per-node samples",
                    f"study-{st.key}-series",
                    "Summed over nodes, mean per time bucket: compare the arms' levels.",
                )
            )
        if st.key == "eviction":
            body.append(evictions_by_position(arms) or "")
        out.append((f"study-{st.key}", st.title, "".join(body)))
    return out


def evictions_by_position(arms: list[Arm]) -> str | None:
    """Grouped bars: evicted pages per prefix-position bucket, one colour per arm."""
    frames = [
        (i, a, a.evictions)
        for i, a in enumerate(arms)
        if a.evictions is not None and len(a.evictions)
    ]
    if not frames:
        return None
    buckets = sorted({int(b) for _, _, f in frames for b in f.prefix_position_from})
    fig, axes = new_figure(1, 1, width=8.0, height=3.2)
    ax = axes[0, 0]
    width = 0.8 / len(frames)
    for k, (i, a, f) in enumerate(frames):
        per = f.groupby("prefix_position_from").evicted_pages.sum()
        ax.bar(
            np.arange(len(buckets)) + k * width,
            [int(per.get(b, 0)) for b in buckets],
            width,
            color=color(i),
            label=mpl_label(a.label),
        )
    ax.set_xticks(
        np.arange(len(buckets)) + 0.4 - width / 2,
        [f"{b:,}+" for b in buckets],
        rotation=30,
        ha="right",
    )
    ax.set(
        title="Evicted pages by position in their prefix",
        xlabel="page's first token position in the prompt (tokens, power-of-two buckets)",
        ylabel="evicted pages (count, all nodes)",
    )
    thousands(ax.yaxis)
    legend_outside(ax)
    return figure_html(
        fig,
        "study-eviction-positions",
        "Evicted pages by prefix position",
        "Bars far right are pages deep inside long prefixes: an arm that evicts many of them is throwing away costly-to-rebuild system prompts.",
    )


def other_series_section(arms: list[Arm]) -> tuple[str, str, str] | None:
    """Numeric series columns that no section knows, so a new metric is never silently dropped."""
    known = set(SERIES_COLUMNS) | {c for st in STUDIES for c in st.series_columns}
    cols: list[str] = []
    for a in arms:
        if a.series is None:
            continue
        for c in a.series.columns:
            if c not in known and c not in cols and np.issubdtype(a.series[c].dtype, np.number):
                cols.append(c)
    if not cols:
        return None
    figs = [
        series_figure(
            arms,
            cols[i : i + 3],
            "Other time series",
            f"other-series-{i}",
            "Columns of timeseries.csv that no report section knows yet, summed over nodes.",
        )
        for i in range(0, min(len(cols), 9), 3)
    ]
    note = "" if len(cols) <= 9 else f"<p>{len(cols) - 9} more column(s) not plotted.</p>"
    return "other-series", "Other time series", "".join(figs) + note
