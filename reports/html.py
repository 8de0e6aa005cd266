"""A self-contained HTML report of one or more run directories.

One file, readable offline: inline CSS, matplotlib plots as inline <svg>, no script, no external
URL, no font. Sections: headline table, gain decomposition, latency, KV memory, queues and load,
Gantt view of steps and requests (runs with steps.csv),
prefix hits, study-specific sections (when the run has their metrics), provenance footer.
Every string from a config or trace is escaped (an arm named "<script>" prints as text).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from html import escape
from pathlib import Path
from typing import Any

from reports import pieces, plots_cluster, plots_gantt, plots_latency, studies, tables
from reports.catalog import number
from reports.output import check_output, write_output
from reports.rundata import Arm, Run, all_arms, load_runs

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#222;
 max-width:1180px;margin:0 auto;padding:0 20px 40px}
h1{font-size:22px;margin:22px 0 4px}h2{font-size:18px;margin:30px 0 6px;border-bottom:2px solid #0072B2}
p.lede{color:#555;margin:0 0 10px}nav{display:flex;flex-wrap:wrap;gap:4px 14px}nav a{white-space:nowrap}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:8px 0}
th,td{padding:4px 9px;border-bottom:1px solid #e3e3e3;text-align:right;vertical-align:top}
th{background:#f4f6f8;font-weight:600;font-size:12px}td:first-child,th:first-child{text-align:left}
table.headline td{white-space:nowrap}.ratio{display:block;color:#777;font-size:11px}
.best{color:#006b4f}.good{color:#006b4f}.bad{color:#b33c00}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
.s0{background:#0072B2}.s1{background:#E69F00}.s2{background:#009E73}.s3{background:#D55E00}
.s4{background:#CC79A7}.s5{background:#56B4E9}.s6{background:#F0E442}.s7{background:#000}
figure{margin:14px 0 22px}figure svg{max-width:100%;height:auto}
figcaption{color:#444;font-size:13px;max-width:900px}.note{color:#777;font-style:italic}
details{margin:8px 0}summary{cursor:pointer;color:#0072B2}
pre{background:#f6f8fa;padding:10px;overflow:auto;max-height:420px;font-size:12px}
footer{margin-top:36px;border-top:1px solid #ccc;padding-top:8px;font-size:13px;color:#444}
dl.prov{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px}dt{font-weight:600}dd{margin:0}
"""


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{escape(anchor)}"><h2>{escape(title)}</h2>{body}</section>'


def _or_note(fig: str | None, what: str) -> str:
    return fig if fig else f'<p class="note">{escape(what)}</p>'


def _pieces(runs: list[Run], arms: list[Arm], gantt_window) -> dict[str, Callable[[], Any]]:
    """The page's figures (nearly all of its rendering time), the costliest first."""
    return {
        **plots_gantt.gantt_pieces(runs, gantt_window),
        "kv": partial(plots_cluster.kv_memory_figures, arms),
        "node-load": partial(plots_cluster.node_load_figure, arms),
        "studies": partial(studies.study_sections, arms),
        "ttft-vs-prompt": partial(plots_latency.ttft_scatter_figure, arms),
        "queue": partial(plots_cluster.queue_figure, arms),
        "gain": partial(plots_latency.gain_figure, arms),
        "cdf-ttft": partial(plots_latency.cdf_figure, arms, "ttft"),
        "cdf-e2e": partial(plots_latency.cdf_figure, arms, "e2e"),
        "requests-per-node": partial(plots_cluster.requests_per_node_figure, arms),
        "hit-rate": partial(plots_cluster.hit_rate_figure, arms),
        "other-series": partial(studies.other_series_section, arms),
    }


def _memory_body(arms: list[Arm], figs: dict[str, Any]) -> str:
    kv = figs["kv"]
    if not any(kv):
        return (
            '<p class="note">No arm recorded KV memory (kv_allocated_bytes) in timeseries.csv.</p>'
        )
    return "".join(f for f in kv if f)


def _body_sections(arms: list[Arm], figs: dict[str, Any]) -> list[tuple[str, str, str]]:
    all_metrics = (
        f"<details><summary>All summary metrics</summary>{tables.all_metrics_table(arms)}</details>"
    )
    latency = [
        figs["cdf-ttft"],
        figs["cdf-e2e"],
        figs["ttft-vs-prompt"],
        "<h3>Per request class</h3>",
        tables.tag_table(arms),
    ]
    queues = [
        _or_note(figs["queue"], "No queue samples (waiting) in timeseries.csv."),
        _or_note(figs["node-load"], "No per-node load samples (load) in timeseries.csv."),
        figs["requests-per-node"] or "",
    ]
    sections = [
        ("headline", "Headline", _headline_note(arms) + tables.headline_table(arms) + all_metrics),
        ("gain", "Gain decomposition", figs["gain"] + tables.gain_steps_table(arms)),
        ("latency", "Latency", "".join(latency)),
        ("memory", "KV memory", _memory_body(arms, figs)),
        ("load", "Queues and node load", "".join(queues)),
        ("hits", "Prefix hits", _or_note(figs["hit-rate"], "No finished requests to measure.")),
        *figs["studies"],
    ]
    other = figs["other-series"]
    return [*sections, *([other] if other else [])]


def _headline_note(arms: list[Arm]) -> str:
    note = "&#9733; marks the best arm per column; the grey &times; under a value is its ratio to the first arm."
    if any((number(a.metrics.get("wrong_reuse_tokens")) or 0) > 0 for a in arms):
        note += " &#9888; marks a hit rate that includes KV reused from a different prefix (wrong answers)."
    return f"<p>{note}</p>"


def _provenance(run: Run) -> str:
    s, info = run.summary, run.run_info
    wall = info.get("wall_s")
    items = [
        ("run", run.label),
        ("directory", run.path.name.removesuffix(".partial")),
        ("seed", s.get("seed", "-")),
        ("version", s.get("version", "-")),
        ("latency model", s.get("latency_model", "-")),
        ("step overhead", _step_overhead(s)),
        ("date", info.get("date", "-")),
        ("wall time", f"{wall:.1f} s" if isinstance(wall, int | float) else "-"),
    ]
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{escape(str(v))}</dd>" for k, v in items)
    configs = [("experiment config (config.json)", run.config)] + [
        (f"resolved config of arm {a.name}", a.config) for a in run.arms.values() if a.config
    ]
    det = "".join(
        f"<details><summary>{escape(t)}</summary><pre>{escape(json.dumps(c, indent=2, default=str))}</pre></details>"
        for t, c in configs
        if c
    )
    return f'<dl class="prov">{dl}</dl>{det}'


def _step_overhead(summary: dict) -> str:
    """The fixed per-step cost the arms were priced with, and its source ("not measured")."""
    seen = {
        f"{m['step_overhead_ms']:g} ms per step ({m.get('step_overhead_source', '-')})"
        for m in summary.get("arms", {}).values()
        if isinstance(m.get("step_overhead_ms"), int | float)
    }
    return "; ".join(sorted(seen)) or "-"


def render(
    runs: list[Run],
    gantt_window: tuple[float, float] | None = None,
    workers: int | None = None,
) -> str:
    """The page; `gantt_window` (start, end in simulated s) for the Gantt view (default: 5 s
    from the middle of the run); figures built by `workers` processes (default: one per idle
    core, reports/pieces.py), the same page whatever their number."""
    arms = all_arms(runs)
    figs = pieces.build(_pieces(runs, arms, gantt_window), workers)
    sections = _body_sections(arms, figs)
    gantt = plots_gantt.gantt_section([v for k, v in figs.items() if k.startswith("gantt-")])
    if gantt:
        sections.insert(next(i for i, s in enumerate(sections) if s[0] == "load") + 1, gantt)
    title = "kvsched report: " + ", ".join(r.label for r in runs)
    first = runs[0].summary
    lede = (
        f"{len(arms)} arm(s); simulated {_duration(arms)}; latency model {first.get('latency_model', '-')}; "
        f"seed {first.get('seed', '-')}."
    )
    nav = (
        "".join(f'<a href="#{escape(a)}">{escape(t)}</a>' for a, t, _ in sections)
        + '<a href="#provenance">Provenance</a>'
    )
    footer = "".join(f"<h3>{escape(r.label)}</h3>{_provenance(r)}" for r in runs)
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{escape(title)}</h1><p class="lede">{escape(lede)}</p><nav>{nav}</nav>'
        + "".join(_section(*s) for s in sections)
        + f'<footer id="provenance"><h2>Provenance</h2>{footer}</footer></body></html>\n'
    )


def _duration(arms: list[Arm]) -> str:
    values = {v for a in arms if isinstance(v := a.metrics.get("duration_s"), int | float)}
    return " / ".join(f"{v:g} s" for v in sorted(values)) or "unknown duration"


REPORT_SIGNATURE = "<title>kvsched report"  # an existing --out is replaced only if it has it


def write_report(
    run_dirs: list[Path],
    out: Path,
    gantt_window: tuple[float, float] | None = None,
    workers: int | None = None,
) -> Path:
    """Read the run directories and write one HTML file; returns its path."""
    check_output(Path(out), "--out", signature=REPORT_SIGNATURE)  # before the rendering work
    text = render(load_runs(list(run_dirs)), gantt_window, workers)
    return write_output(Path(out), text, "--out", signature=REPORT_SIGNATURE)
