"""The sweep report: one self-contained HTML file (inline SVG, inline CSS, every string escaped).

Per headline metric a heatmap over the two axes with the most values (mean over the others) or a
line plot when one axis varies; the Pareto fronts of hit rate vs P99 TTFT and throughput vs P99
TTFT; the best configuration per objective with its config ready to paste; the full table.
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from reports.sweep_analysis import (
    HEADLINE,
    OBJECTIVES,
    SweepData,
    axis_values_text,
    best_by,
    configurations,
    load_sweep_dir,
    pareto_front,
    pasteable_yaml,
    records,
)
from reports.sweep_plots import heatmap_svg, line_svg, pareto_svg
from reports.sweep_ratios import ARM_AXIS, RATIOS, arm_ratios, cells_at_least, has_pair
from sim.rundir import cell

_CSS = (
    "body{font-family:sans-serif;max-width:1150px;margin:auto}table{border-collapse:collapse;font-size:13px}"
    "td,th{padding:3px 7px;border-bottom:1px solid #ddd;text-align:right}pre{background:#f6f6f6;"
    "padding:8px;overflow-x:auto;font-size:12px}.err{color:#a00;text-align:left}"
)
_FRONTS = [
    ("prefix_hit_rate", "max", "p99_ttft_ms", "min"),
    ("output_throughput", "max", "p99_ttft_ms", "min"),
]


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def write_sweep_report(sweep_dir: str | Path, out: str | Path) -> None:
    data = load_sweep_dir(sweep_dir)
    configs = configurations(data)
    done = int((data.table.status == "ok").sum())
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>{_e(data.name)} sweep</title><style>{_CSS}</style>",
        f"<h1>Sweep {_e(data.name)}</h1>",
        f"<p>{done} of {len(data.plan['points'])} points ok, {len(data.table) - done} failed; "
        f"{len(configs)} configurations{_seed_note(data)}.</p>",
        _axes_table(data),
    ]
    parts += _ratio_section(data, configs)
    parts += _best_section(data, configs)
    parts += _front_section(data, configs)
    parts += _metric_section(data, configs)
    parts += _points_table(data)
    Path(out).write_text("\n".join(parts) + "\n")


def _seed_note(data: SweepData) -> str:
    return " (metrics are means over the seed axis)" if "seed" in data.axes else ""


def _axes_table(data: SweepData) -> str:
    rows = "".join(
        f"<tr><th>{_e(a)}</th><td style='text-align:left'>{_e(', '.join(map(str, v)))}</td></tr>"
        for a, v in data.plan["spec"]["axes"].items()
    )
    return f"<h2>Axes</h2><table>{rows}</table>"


GAIN_THRESHOLD = 5.0  # the article's claim: "more than 5x" throughput


def _ratio_section(data: SweepData, configs: pd.DataFrame) -> list[str]:
    """The last arm of the `arm` axis against each other arm (e.g. engine vs openclaw variants),
    per configuration of the other axes: heatmaps over the two axes with the most values (max
    and mean over the rest) and every cell where the throughput gain reaches GAIN_THRESHOLD."""
    arms = [str(a) for a in data.plan["spec"]["axes"].get(ARM_AXIS, [])]
    parts = []
    for baseline in arms[:-1]:
        if has_pair(configs, arms[-1], baseline):
            parts += _ratio_parts(data, configs, arms[-1], baseline)
    return parts


def _ratio_parts(data: SweepData, configs: pd.DataFrame, arm: str, baseline: str) -> list[str]:
    axes = [a for a in _varying_axes(data, configs) if a != ARM_AXIS]
    ratios = arm_ratios(configs, axes, arm, baseline)
    parts = [f"<h2>{_e(arm)} / {_e(baseline)}</h2>"]
    if len(axes) >= 2:
        x, y = axes[0], axes[1]
        order = {a: [str(v) for v in _cells(data.plan["spec"]["axes"][a])] for a in (x, y)}
        for name, (_, _, label) in RATIOS.items():
            for agg in ("max", "mean"):
                parts.append(
                    heatmap_svg(
                        ratios, x, order[x], y, order[y], name, f"{label}: {agg} over the rest", agg
                    )
                )
    hits = cells_at_least(ratios, "throughput_ratio", GAIN_THRESHOLD)
    shown = hits if len(hits) else ratios.sort_values("throughput_ratio", ascending=False)[:10]
    parts.append(
        f"<p>{len(hits)} of {len(ratios)} configurations reach {GAIN_THRESHOLD:g}x "
        f"throughput{'' if len(hits) else '; the ten best'}:</p>"
    )
    parts.append(_frame_table(shown, [*axes, *RATIOS]))
    return parts


def _frame_table(df: pd.DataFrame, cols: list[str]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    rows = "".join(
        "<tr>" + "".join(f"<td>{_e(_fmt(r[c]))}</td>" for c in cols) + "</tr>"
        for _, r in df.iterrows()
    )
    return f"<table><tr>{head}</tr>{rows}</table>"


def _best_section(data: SweepData, configs: pd.DataFrame) -> list[str]:
    parts = ["<h2>Best configuration per objective</h2>"]
    for name, (metric, sense, label) in OBJECTIVES.items():
        row = best_by(configs, name)
        if row is None:
            continue
        parts.append(
            f"<h3>{_e(sense)} {_e(label)}: {_e(f'{row[metric]:.4g}')}</h3>"
            f"<p>{_e(axis_values_text(data, row))} (point {int(row['point'])})</p>"
            f"<pre>{_e(pasteable_yaml(data, int(row['point'])))}</pre>"
        )
    return parts


def _front_section(data: SweepData, configs: pd.DataFrame) -> list[str]:
    parts = ["<h2>Pareto fronts</h2>"]
    for x, xs, y, ys in _FRONTS:
        if x not in configs or y not in configs:
            continue
        front = pareto_front(configs, x, xs, y, ys)
        parts.append(pareto_svg(configs, front, x, y, HEADLINE[x], HEADLINE[y]))
        rows = "".join(
            f"<tr><td>{int(r['point'])}</td><td style='text-align:left'>{_e(axis_values_text(data, r))}"
            f"</td><td>{r[x]:.4g}</td><td>{r[y]:.4g}</td></tr>"
            for r in records(front)
        )
        parts.append(
            f"<table><tr><th>point</th><th>configuration</th><th>{_e(HEADLINE[x])}</th>"
            f"<th>{_e(HEADLINE[y])}</th></tr>{rows}</table>"
        )
    return parts


def _varying_axes(data: SweepData, configs: pd.DataFrame) -> list[str]:
    """Axes with more than one value among the configurations, most values first (stable)."""
    varying = [a for a in data.config_axes if configs[a].nunique(dropna=False) > 1]
    return sorted(varying, key=lambda a: -configs[a].nunique(dropna=False))


def _metric_section(data: SweepData, configs: pd.DataFrame) -> list[str]:
    axes = _varying_axes(data, configs)
    if not axes:
        return []
    parts = ["<h2>Metrics over the axes</h2>"]
    rest = axes[2:]
    if len(axes) >= 2 and rest:
        parts.append(
            f"<p>Heatmaps over {_e(axes[0])} and {_e(axes[1])}, mean over {_e(', '.join(rest))}.</p>"
        )
    order = {a: list(dict.fromkeys(_cells(data.plan["spec"]["axes"][a]))) for a in axes}
    for metric, label in HEADLINE.items():
        if metric not in configs or configs[metric].isna().all():
            continue
        if len(axes) == 1:
            parts.append(line_svg(configs, axes[0], order[axes[0]], metric, label))
        else:
            parts.append(
                heatmap_svg(
                    configs, axes[0], order[axes[0]], axes[1], order[axes[1]], metric, label
                )
            )
    return parts


def _cells(values: list) -> list:
    """Axis values as the table holds them."""
    return [cell(v) for v in values]


def _points_table(data: SweepData) -> list[str]:
    cols = ["point", *data.axes, "status", *[m for m in HEADLINE if m in data.table], "wall_s"]
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    rows = []
    for _, r in data.table.iterrows():
        cells = "".join(f"<td>{_e(_fmt(r[c]))}</td>" for c in cols)
        err = f"<td class='err'>{_e(r['error'])}</td>" if r["status"] != "ok" else ""
        rows.append(f"<tr>{cells}{err}</tr>")
    return [f"<h2>All points</h2><table><tr>{head}</tr>{''.join(rows)}</table>"]


def _fmt(value) -> str:
    if isinstance(value, float):
        return "-" if pd.isna(value) else f"{value:.4g}"
    return str(value)


def best_configs_text(sweep_dir: str | Path) -> str:
    """Plain-text best configuration per objective (for the terminal)."""
    data = load_sweep_dir(sweep_dir)
    configs = configurations(data)
    lines = []
    for name, (metric, sense, label) in OBJECTIVES.items():
        row = best_by(configs, name)
        if row is not None:
            lines.append(
                f"best {name:>10} ({sense} {label} = {row[metric]:.4g}): "
                f"{axis_values_text(data, row)} (point {int(row['point'])})"
            )
    return "\n".join(lines)
