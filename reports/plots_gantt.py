"""The report's Gantt view: what each node ran in a short window, without a trace viewer.

Per node: one row of steps coloured by the prefill share of their tokens (blue = all decode,
orange = all prefill), then one lane per request (routing / queued / prefill / decode phases as
bars). The same events as `kvsched timeline` (reports/timeline_data.py), drawn for arms whose run
recorded steps.csv.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.patches import Patch

from reports.figures import figure_html, mpl_label, new_figure
from reports.timeline_data import Timeline, assign_lanes, load_timeline, request_phases
from sim.rundir import arm_dir_name

DEFAULT_WINDOW_S = 5.0  # long enough for tens of steps of a 70B node, short enough to see each
MAX_LANES = 48  # request lanes drawn per node; the caption says how many were left out
PREFILL_SHARE = LinearSegmentedColormap.from_list("prefill_share", ["#0072B2", "#E69F00"])
STEP_KEYS = [(0.0, "decode only"), (0.5, "half prefill tokens"), (1.0, "prefill only")]
PHASE_COLORS = {
    "routing": "#BBBBBB",
    "queued": "#999999",
    "queued+prefill": "#F0C36D",
    "prefill": "#E69F00",
    "decode": "#56B4E9",
}


def default_window(duration_s: float) -> tuple[float, float]:
    """DEFAULT_WINDOW_S from the middle of the run (steady state, not the warm-up)."""
    width = min(DEFAULT_WINDOW_S, duration_s)
    start = max(0.0, duration_s / 2 - width / 2)
    return start, start + width


def _prefill_share(steps) -> np.ndarray:
    tokens = steps.prefill_tokens.to_numpy(float) + steps.num_decode.to_numpy(float)
    return np.divide(
        steps.prefill_tokens.to_numpy(float), tokens, out=np.zeros(len(steps)), where=tokens > 0
    )


def _draw_node(ax, tl: Timeline, node: int) -> int:
    """Steps at y = -1.2, request lanes at y = 0, 1, ...; returns requests not drawn."""
    assert tl.steps is not None
    steps = tl.steps[tl.steps.node == node]
    starts = steps.start_s.clip(lower=tl.start_s).to_numpy()
    ends = (steps.start_s + steps.duration_s).clip(upper=tl.end_s).to_numpy()
    colors = PREFILL_SHARE(_prefill_share(steps))
    ax.broken_barh(
        list(zip(starts, ends - starts, strict=True)),
        (-1.9, 1.4),
        facecolors=colors,
        edgecolor="white",
        linewidth=0.3,
    )
    rows = [r for r in tl.requests.itertuples(index=False) if r.node == node]
    phases = [request_phases(r, tl.start_s, tl.end_s) for r in rows]
    phases = [p for p in phases if p]
    lanes = assign_lanes([(p[0][1], p[-1][2]) for p in phases])
    for name, color in PHASE_COLORS.items():
        bars = [
            (a, b - a, lane)
            for p, lane in zip(phases, lanes, strict=True)
            if lane < MAX_LANES
            for n, a, b in p
            if n == name
        ]
        for lane in sorted({b[2] for b in bars}):
            ax.broken_barh(
                [(a, w) for a, w, k in bars if k == lane],
                (lane - 0.4, 0.8),
                facecolors=color,
                label=name,
            )
    shown = min(MAX_LANES, max(lanes, default=-1) + 1)
    ax.set_ylim(shown - 0.4, -2.0)
    ticks: dict[float, str] = {-1.2: "steps", **({0.0: "requests"} if shown else {})}
    ax.set_yticks(list(ticks), list(ticks.values()))
    ax.set_ylabel(f"node {node}")
    ax.grid(False)
    return sum(lane >= MAX_LANES for lane in lanes)


def gantt_figure(
    run_dir: Path, arm: str, label: str, key: str, window: tuple[float, float] | None
) -> str | None:
    """The arm's Gantt figure, or None when its run has no steps.csv."""
    if not (Path(run_dir) / arm_dir_name(arm) / "steps.csv").is_file():
        return None
    tl = load_timeline(run_dir, arm, *(window or (None, None)))
    if window is None:
        tl = load_timeline(run_dir, arm, *default_window(tl.end_s))
    heights = [2 + min(MAX_LANES, _lanes(tl, n)) * 0.35 for n in range(tl.num_nodes)]
    fig, axes = new_figure(
        tl.num_nodes,
        1,
        height=min(14.0, 0.6 + sum(heights) * 0.22),
        sharex=True,
        gridspec_kw={"height_ratios": heights},
    )
    hidden = sum(
        _draw_node(ax, tl, n) for n, ax in zip(range(tl.num_nodes), axes[:, 0], strict=True)
    )
    axes[-1, 0].set_xlim(tl.start_s, tl.end_s)
    for ax in axes[:, 0]:
        ax.set_xlabel("simulated time (s)")
        ax.xaxis.label.set_visible(ax is axes[-1, 0])  # shown under the last node only
    fig.suptitle(f"{mpl_label(label)}: steps and requests per node, {tl.start_s:g}-{tl.end_s:g} s")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    steps = [Patch(color=PREFILL_SHARE(v), label=f"step: {t}") for v, t in STEP_KEYS]
    unique = {**{h.get_label(): h for h in steps}, **dict(zip(labels, handles, strict=True))}
    fig.legend(unique.values(), unique.keys(), loc="outside lower center", ncol=4)
    caption = (
        f"Arm {label}, {tl.start_s:g} to {tl.end_s:g} s of simulated time: each node's steps "
        "(blue = decode only, orange = prefill only) above its requests, one lane each "
        "(grey: routing and queued, orange: prefill, light blue: decode); a gap in the steps row "
        "is an idle node."
    )
    if hidden:
        caption += f" {hidden} requests beyond {MAX_LANES} concurrent lanes per node are not drawn."
    return figure_html(fig, key, f"Gantt: {label}", caption)


def _lanes(tl: Timeline, node: int) -> int:
    rows = tl.requests[tl.requests.node == node]
    spans = [request_phases(r, tl.start_s, tl.end_s) for r in rows.itertuples(index=False)]
    return max(assign_lanes([(p[0][1], p[-1][2]) for p in spans if p]), default=-1) + 1


def gantt_pieces(runs, window: tuple[float, float] | None) -> dict[str, partial[str | None]]:
    """One Gantt figure per arm, each None when its run has no steps.csv (reports/pieces.py)."""
    arms = [(run, arm) for run in runs for arm in run.arms.values()]
    return {
        f"gantt-{i}": partial(gantt_figure, run.path, arm.name, arm.label, f"gantt-{i}", window)
        for i, (run, arm) in enumerate(arms)
    }


def gantt_section(figs: list[str | None]) -> tuple[str, str, str] | None:
    """The report section from the arms' Gantt figures; None if no arm recorded steps."""
    drawn = [f for f in figs if f]
    if not drawn:
        return None
    note = (
        "<p>The steps and requests of a short window, from <code>steps.csv</code> "
        "(runs with <code>record_steps: true</code>). For the whole run in a zoomable viewer: "
        "<code>kvsched timeline RUN_DIR</code>, then open the JSON in Perfetto.</p>"
    )
    return ("gantt", "Timeline (Gantt)", note + "".join(drawn))
