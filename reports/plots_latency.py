"""Latency plots from requests.csv: TTFT/E2E CDFs per arm, TTFT vs prompt length, gain steps."""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports.catalog import number
from reports.figures import (
    cdf_points,
    color,
    figure_html,
    legend_outside,
    log_axis,
    mpl_label,
    new_figure,
    scatter_keep,
    thousands,
)
from reports.rundata import Arm


def finished(requests: pd.DataFrame) -> pd.DataFrame:
    return requests[requests.status == "finished"]


def latency_ms(arm: Arm, kind: str) -> np.ndarray:
    """Per finished request: "ttft" (arrival to first token) or "e2e" (arrival to last token), ms."""
    done = arm.finished_rows
    end = done.first_token_s if kind == "ttft" else done.finish_s
    return ((end - done.arrival_s) * 1e3).to_numpy(dtype=float)


_KIND_TEXT = {"ttft": ("TTFT", "time to first token"), "e2e": ("E2E latency", "end-to-end latency")}


def cdf_figure(arms: list[Arm], kind: str) -> str:
    short, long = _KIND_TEXT[kind]
    fig, axes = new_figure(width=7.5, height=3.4)
    ax = axes[0, 0]
    lowest = np.inf  # the lowest latency drawn: a log axis needs one, above 0
    for i, arm in enumerate(arms):
        values = latency_ms(arm, kind)
        x, y = cdf_points(values)
        if x.size:
            lowest = min(lowest, float(x[0]))
            label = f"{arm.label} ({values.size:,} finished, {len(arm.request_rows) - values.size:,} not)"
            ax.step(x, y, where="post", color=color(i), lw=1.4, label=mpl_label(label))
            ax.plot(
                x[-1], y[-1], "o", color=color(i), ms=3
            )  # the slowest request: where the tail ends
    ax.axhline(0.99, color="#888", lw=0.8, ls=":")
    ax.text(
        0.0, 0.99, " P99", va="bottom", fontsize=7, color="#666", transform=ax.get_yaxis_transform()
    )
    log = 0 < lowest < np.inf  # no finished request (a short run): a plain, empty axis
    if log:
        log_axis(ax, "x")
    ax.set(
        title=f"{short} CDF per arm",
        xlabel=f"{long} (ms, log scale)" if log else f"{long} (ms)",
        ylabel="share of finished requests (0-1)",
        ylim=(0, 1.02),
    )
    legend_outside(ax)
    caption = (
        "Further left is faster: compare where each curve crosses the dotted P99 line and the dot "
        "at each arm's slowest request (the top 1% is drawn point by point; requests unfinished at "
        "the end of the run, counted in the legend, are not in the curves)."
    )
    return figure_html(fig, f"cdf-{kind}", f"{short} CDF per arm", caption)


def ttft_scatter_figure(arms: list[Arm]) -> str:
    fig, axes = new_figure(width=7.5, height=3.6)
    ax = axes[0, 0]
    lowest = np.inf  # the lowest TTFT drawn: a log axis needs one, above 0
    for i, arm in enumerate(arms):
        done = arm.finished_rows
        ttft = ((done.first_token_s - done.arrival_s) * 1e3).to_numpy(dtype=float)
        keep = scatter_keep(ttft)
        lowest = min(lowest, float(np.min(ttft[keep], initial=np.inf)))
        ax.scatter(
            done.prompt_tokens.to_numpy()[keep],
            ttft[keep],
            s=6,
            alpha=0.55,
            color=color(i),
            label=mpl_label(arm.label),
            linewidths=0,
        )
    log = 0 < lowest < np.inf  # no finished request (a short run): a plain, empty axis
    if log:
        log_axis(ax, "y")
    ax.set(
        title="TTFT vs prompt length",
        xlabel="prompt length (tokens)",
        ylabel="time to first token (ms, log scale)" if log else "time to first token (ms)",
    )
    legend_outside(ax)
    caption = (
        "Each dot is one finished request: a cached prefix lowers TTFT at equal prompt length, and "
        "queueing lifts whole bands; the slowest 1% are always drawn, the rest thinned evenly."
    )
    return figure_html(fig, "ttft-vs-prompt", "TTFT vs prompt length", caption)


def _step_bars(
    ax, labels: list[str], values: list[float | None], better: int, unit_scale: float = 1.0
) -> None:
    """Waterfall: the first arm as a full bar, each next arm as the step from the arm before."""
    prev = None
    for i, v in enumerate(values):
        if v is None:
            ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=7)
            continue
        v *= unit_scale
        if prev is None:
            ax.bar(i, v, color="#999", width=0.6)
        else:
            good = (v - prev) * better >= 0
            ax.bar(i, v - prev, bottom=prev, width=0.6, color="#009E73" if good else "#D55E00")
            ax.plot([i - 1.3, i - 0.3], [prev, prev], color="#444", lw=0.7)
        ax.text(
            i, v, f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}", ha="center", va="bottom", fontsize=7
        )
        prev = v
    ax.set_xticks(range(len(labels)), [mpl_label(x) for x in labels], rotation=20, ha="right")
    ax.set_ylim(top=ax.get_ylim()[1] * 1.1)  # room for the value labels under the title


def gain_figure(arms: list[Arm]) -> str:
    labels = [a.label for a in arms]
    fig, axes = new_figure(1, 3, width=10.5, height=3.4)
    panels = [
        ("output_throughput", "Output throughput", "output throughput (tok/s)", +1, 1.0),
        ("p99_ttft_ms", "P99 TTFT", "P99 time to first token (ms)", -1, 1.0),
        ("prefix_hit_rate", "Prefix hit rate", "prompt tokens served from cache (%)", +1, 100.0),
    ]
    for ax, (key, title, ylabel, better, scale) in zip(axes[0], panels, strict=True):
        _step_bars(ax, labels, [number(a.metrics.get(key)) for a in arms], better, scale)
        ax.set(title=f"{title}: step per arm", ylabel=ylabel, xlabel="arm (in run order)")
        thousands(ax.yaxis)
    caption = (
        "Each arm is drawn as the step from the arm before it (green = better, red = worse), so "
        "the bars read as what each added mechanism bought; grey is the first arm."
    )
    return figure_html(fig, "gain", "Gain decomposition", caption)
