"""A self-contained HTML report of one or more run directories (inline SVG plots, inline CSS)."""

from __future__ import annotations

import html
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from sim.cli import SUMMARY_COLUMNS, _fmt  # noqa: E402


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _load(run_dir: Path) -> tuple[dict, dict[str, pd.DataFrame], dict[str, pd.DataFrame]]:
    summary = json.loads((run_dir / "summary.json").read_text())
    requests, series = {}, {}
    for arm in summary["arms"]:
        arm_dir = run_dir / "".join(c if c.isalnum() or c in "+-_." else "_" for c in arm)
        requests[arm] = pd.read_csv(arm_dir / "requests.csv")
        series[arm] = pd.read_csv(arm_dir / "timeseries.csv")
    return summary, requests, series


def write_report(run_dirs: list[Path], out: Path) -> None:
    parts = ["<!doctype html><meta charset='utf-8'><title>kvsched report</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
             "td,th{padding:4px 8px;border-bottom:1px solid #ddd;text-align:right}</style>"]
    for run_dir in run_dirs:
        summary, requests, series = _load(Path(run_dir))
        parts.append(f"<h1>{html.escape(str(summary.get('name', run_dir)))}</h1>")
        head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in SUMMARY_COLUMNS)
        rows = "".join(
            f"<tr><th>{html.escape(arm)}</th>" + "".join(f"<td>{_fmt(k, m.get(k), f)}</td>" for k, _, f in SUMMARY_COLUMNS) + "</tr>"
            for arm, m in summary["arms"].items()
        )
        parts.append(f"<table><tr><th>arm</th>{head}</tr>{rows}</table>")
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for arm, df in requests.items():
            done = df[df.status == "finished"]
            ttft = ((done.first_token_s - done.arrival_s) * 1e3).sort_values()
            ax.plot(ttft.to_numpy(), (pd.Series(range(1, len(ttft) + 1)) / max(1, len(ttft))).to_numpy(), label=arm)
        ax.set(xscale="log", xlabel="TTFT (ms)", ylabel="share of requests", title="TTFT CDF per arm")
        ax.legend()
        parts.append(_svg(fig))
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for arm, df in series.items():
            total = df.groupby("time_s")[["kv_allocated_bytes", "kv_cached_bytes"]].sum().sum(axis=1) / 1e9
            ax.plot(total.index, total.to_numpy(), label=arm)
        ax.set(xlabel="simulated time (s)", ylabel="KV held (GB, all nodes)", title="KV memory over time")
        ax.legend()
        parts.append(_svg(fig))
        parts.append(f"<p>latency model: {html.escape(str(summary.get('latency_model')))}</p>")
    Path(out).write_text("\n".join(parts))
