"""HTML tables of a report: headline (best marked, ratios to the first arm), gain steps, per
request class, and every summary metric. Every string from a run is escaped here."""

from __future__ import annotations

from html import escape

import numpy as np

from reports.catalog import HEADLINE, best_value, fmt, header, metric, number, ratio
from reports.plots_latency import finished
from reports.rundata import Arm


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """`head` and cells are already HTML (escaped by the caller)."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<div class="scroll"><table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def headline_table(arms: list[Arm]) -> str:
    keys = [k for k in HEADLINE if any(k in a.metrics for a in arms)]
    best = {k: best_value(k, [a.metrics.get(k) for a in arms]) for k in keys}
    first = arms[0].metrics
    rows = []
    for i, arm in enumerate(arms):
        row = [f'<span class="swatch s{i % 8}"></span>{escape(arm.label)}']
        for k in keys:
            v = arm.metrics.get(k)
            cell = escape(fmt(k, v))
            if best[k] is not None and number(v) is not None and fmt(k, v) == fmt(k, best[k]):
                cell = f'<b class="best" title="best of the arms">{cell}&#9733;</b>'
            if k == "prefix_hit_rate" and (number(arm.metrics.get("wrong_reuse_tokens")) or 0) > 0:
                cell += '<span class="bad" title="includes KV reused from a different prefix">&#9888;</span>'
            r = ratio(v, first.get(k))
            if i and r is not None:
                cell += f'<span class="ratio">&times;{r:.2f}</span>'
            row.append(cell)
        rows.append(row)
    return _table(["arm", *(escape(header(k)) for k in keys)], rows, "headline")


def gain_steps_table(arms: list[Arm]) -> str:
    """Each arm against the one before it: what the added mechanism changed."""
    rows = []
    for prev, arm in zip(arms, arms[1:], strict=False):
        cells = [f"{escape(prev.label)} &rarr; {escape(arm.label)}"]
        for k in ("output_throughput", "p99_ttft_ms", "p99_e2el_ms"):
            r = ratio(arm.metrics.get(k), prev.metrics.get(k))
            cells.append("-" if r is None else _signed_ratio(r, metric(k).better))
        a, b = (
            number(arm.metrics.get("prefix_hit_rate")),
            number(prev.metrics.get("prefix_hit_rate")),
        )
        cells.append("-" if a is None or b is None else _signed_points(100 * (a - b)))
        rows.append(cells)
    head = ["step", "output throughput", "P99 TTFT", "P99 E2E", "prefix hit rate"]
    return _table(head, rows, "steps") if rows else "<p>One arm only: no steps to decompose.</p>"


def _signed_ratio(r: float, better: int) -> str:
    """Coloured only when the shown value moved: a red "x1.00" would flag noise as a loss."""
    shown = round(r, 2)
    cls = "good" if (shown - 1) * better > 0 else "bad" if (shown - 1) * better < 0 else ""
    return f'<span class="{cls}">&times;{r:.2f}</span>'


def _signed_points(d: float) -> str:
    shown = round(d, 1)
    cls = "good" if shown > 0 else "bad" if shown < 0 else ""
    return f'<span class="{cls}">{shown + 0.0:+.1f} pts</span>'


def tag_table(arms: list[Arm]) -> str:
    """Per request class (the workload's tag): count, hit rate and TTFT percentiles."""
    if not all("tag" in a.request_rows.columns for a in arms):
        return ""
    rows = []
    for arm in arms:
        r = arm.request_rows
        for tag, g in r.groupby(r.tag.fillna("-").astype(str), sort=True):
            done = finished(g)
            ttft = ((done.first_token_s - done.arrival_s) * 1e3).to_numpy(dtype=float)
            served = g[g.status != "failed"]
            prompt = served.prompt_tokens.sum()
            hit = (
                served.cached_tokens.sum() / prompt
                if "cached_tokens" in g.columns and prompt
                else None
            )
            rows.append(
                [
                    escape(arm.label),
                    escape(tag),
                    f"{len(g):,}",
                    f"{len(done):,}",
                    "-" if hit is None else f"{100 * hit:.1f}",
                    _pct(ttft, 50),
                    _pct(ttft, 99),
                ]
            )
    head = [
        "arm",
        "request class",
        "requests",
        "finished",
        "prefix hit rate (%)",
        "P50 TTFT (ms)",
        "P99 TTFT (ms)",
    ]
    return _table(head, rows, "tags")


def _pct(values: np.ndarray, q: float) -> str:
    return f"{np.percentile(values, q):,.0f}" if values.size else "-"


def all_metrics_table(arms: list[Arm]) -> str:
    """Every key of every arm's summary, including ones no report section knows."""
    keys = list(dict.fromkeys(k for a in arms for k in a.metrics))
    rows = [
        [
            escape(header(k)),
            f"<code>{escape(k)}</code>",
            *(escape(fmt(k, a.metrics.get(k))) for a in arms),
        ]
        for k in keys
    ]
    return _table(["metric", "key", *(escape(a.label) for a in arms)], rows, "all")
