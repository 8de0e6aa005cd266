"""The validation report: a measured engine run against the simulation of the same requests.

Per metric (step time, TTFT, TPOT, E2E): a scatter of simulated against measured values (the
diagonal is a perfect prediction) and both CDFs; a table of the absolute relative errors beside
the goals and published reference points.
"""

from __future__ import annotations

from html import escape

import numpy as np
import pandas as pd

from reports.figures import cdf_points, color, figure_html, new_figure, style
from reports.html import CSS

TITLE = "kvsched validation"
GOALS = {  # issue 14: median / p90 of the absolute relative error
    "step_time": (0.05, 0.10),
    "ttft": (0.05, 0.15),
    "tpot": (0.05, 0.15),
    "e2e": (None, None),
}
LABELS = {"step_time": "step time", "ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E"}


def _pct(v) -> str:
    return "–" if v is None else f"{v:.1%}"


def _error_table(result: dict) -> str:
    """Median and p90 error per metric against the goals; with a repeat of the engine run
    (`kvsched validate --repeat`), the engine's own run-to-run errors beside them."""
    repeat = result.get("repeat")
    rows = []
    for key, label in LABELS.items():
        goal_med, goal_p90 = GOALS[key]
        med, p90 = result.get(f"{key}_median_abs_err"), result.get(f"{key}_p90_abs_err")
        rows.append(
            f"<tr><td>{label}</td><td>{_pct(med)}</td><td>{_pct(goal_med)}</td>"
            f"<td>{_pct(p90)}</td><td>{_pct(goal_p90)}</td>"
            + (_repeat_cells(repeat, key) if repeat else "")
            + "</tr>"
        )
    rows.append(
        f"<tr><td>output throughput</td><td>{_pct(result.get('throughput_abs_err'))}</td>"
        f"<td>{_pct(0.03)}</td><td></td><td></td>"
        + (f"<td>{_pct(repeat.get('throughput_abs_err'))}</td><td></td>" if repeat else "")
        + "</tr>"
    )
    head = "<tr><th>metric</th><th>median</th><th>goal</th><th>p90</th><th>goal</th>"
    if repeat:
        head += "<th>engine vs its repeat: median</th><th>p90</th>"
    return f'<table class="headline">{head}</tr>{"".join(rows)}</table>'


def _repeat_cells(repeat: dict, key: str) -> str:
    med, p90 = repeat.get(f"{key}_median_abs_err"), repeat.get(f"{key}_p90_abs_err")
    return f"<td>{_pct(med)}</td><td>{_pct(p90)}</td>"


def latency_table(requests: pd.DataFrame) -> pd.DataFrame:
    """Per finished request (requests.csv): TTFT, TPOT (NaN for one output) and E2E, seconds."""
    done = requests[requests.status == "finished"].set_index("request_id")
    tpot = (done.finish_s - done.first_token_s) / (done.output_tokens - 1).where(
        done.output_tokens > 1
    )
    return pd.DataFrame(
        {
            "ttft_s": done.first_token_s - done.arrival_s,
            "tpot_s": tpot,
            "e2e_s": done.finish_s - done.arrival_s,
        }
    )


def _scatter(key: str, measured: np.ndarray, simulated: np.ndarray) -> str:
    fig, axes = new_figure(1, 2, width=9.0, height=3.3)
    ax, cdf = axes[0]
    ax.scatter(measured * 1e3, simulated * 1e3, s=6, alpha=0.5, color=color(0))
    hi = float(np.nanmax(np.concatenate([measured, simulated]))) * 1e3 if measured.size else 1.0
    ax.plot([0, hi], [0, hi], color="#888", linewidth=1, label="perfect")
    ax.set_xlabel(f"measured {LABELS[key]} (ms)")
    ax.set_ylabel(f"simulated {LABELS[key]} (ms)")
    ax.set_title(f"{LABELS[key]}: simulated vs measured")
    for i, (name, values) in enumerate([("measured", measured), ("simulated", simulated)]):
        x, y = cdf_points(values * 1e3)
        cdf.plot(x, y, color=color(i), label=name)
    cdf.set_xlabel(f"{LABELS[key]} (ms)")
    cdf.set_ylabel("share of requests" if key != "step_time" else "share of steps")
    cdf.legend(loc="lower right")
    cdf.set_title(f"{LABELS[key]}: CDF")
    caption = (
        f"{LABELS[key]}: points on the diagonal are exact predictions; the CDFs show where the "
        "simulated distribution departs from the measured one."
    )
    return figure_html(fig, f"val-{key}", LABELS[key], caption)


def render_validation(result: dict, tables: dict[str, pd.DataFrame]) -> str:
    measured, simulated = latency_table(tables["measured"]), latency_table(tables["simulated"])
    both = measured.merge(simulated, left_index=True, right_index=True, suffixes=("_m", "_s"))
    steps = tables["steps"]
    pairs = {"step_time": (steps.measured_s.to_numpy(), steps.predicted_s.to_numpy())}
    for key, col in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2e", "e2e_s")):
        pairs[key] = (both[f"{col}_m"].to_numpy(float), both[f"{col}_s"].to_numpy(float))
    with style():
        figures = [_scatter(k, m, s) for k, (m, s) in pairs.items()]
    mismatch = (
        f"Cached tokens mismatched per request: {result['cached_tokens_mismatch']} when the "
        f"scheduler replays the engine's arrivals and step times (same cache code: must be 0), "
        f"{result['cached_tokens_mismatch_free_run']} in the free-running simulation (its "
        f"timing differs). Step compositions mismatched in the replay: "
        f"{result['step_composition_mismatch']} of {result['replayed_steps']}."
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{TITLE}</title>"
        f"<style>{CSS}</style></head><body><h1>{TITLE}</h1>"
        f"<p class='lede'>{escape(result['run'])}: measured on the GPU vs "
        f"{escape(result['latency_model'])}, {result['requests_compared']} requests compared."
        f"</p>{_error_table(result)}<p>{escape(mismatch)}</p>{''.join(figures)}</body></html>"
    )
