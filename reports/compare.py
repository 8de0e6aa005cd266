"""`kvsched compare A B`: two runs, or two arms, side by side with deltas.

A side is `RUN_DIR` (every arm the two runs share, paired by name) or `RUN_DIR:ARM` (one arm).
Output: a terminal table per pair, and with --out an HTML page with the same tables and the
latency, queue and hit-rate plots of both sides overlaid.
"""

from __future__ import annotations

import copy
from html import escape
from pathlib import Path

from reports import plots_cluster, plots_latency
from reports.catalog import HEADLINE, fmt, header, metric, number
from reports.figures import style
from reports.html import CSS
from reports.output import check_output, write_output
from reports.rundata import Arm, Run, load_run
from sim.config import ConfigError

COMPARE_KEYS = [
    *HEADLINE,
    "completed",
    "failed",
    "false_hits",
    "wrong_reuse_tokens",
    "use_after_free",
    "evicted_pages",
    "load_imbalance",
    "network_bytes",
]


def parse_side(spec: str, frames: bool) -> tuple[Run, str | None]:
    """`RUN_DIR` or `RUN_DIR:ARM` (a directory whose name has a colon is taken whole)."""
    if Path(spec).is_dir() or ":" not in spec:
        return load_run(spec, frames), None
    path, arm = spec.rsplit(":", 1)
    run = load_run(path, frames)
    if arm not in run.arms:
        raise ConfigError(f"compare: unknown arm {arm!r} in {path}; allowed: {', '.join(run.arms)}")
    return run, arm


def pair_arms(a: tuple[Run, str | None], b: tuple[Run, str | None]) -> list[tuple[Arm, Arm]]:
    (run_a, arm_a), (run_b, arm_b) = a, b
    if arm_a and arm_b:
        return [(run_a.arms[arm_a], run_b.arms[arm_b])]
    named = arm_a or arm_b
    names = [named] if named else [n for n in run_a.arms if n in run_b.arms]
    missing = [n for n in names if n not in run_a.arms or n not in run_b.arms]
    if missing or not names:
        raise ConfigError(
            f"compare: no arm {', '.join(missing) or 'in common'} in both runs "
            f"(A: {', '.join(run_a.arms)}; B: {', '.join(run_b.arms)}); name one with RUN_DIR:ARM"
        )
    return [(run_a.arms[n], run_b.arms[n]) for n in names]


def delta_rows(a: Arm, b: Arm) -> list[tuple[str, str, str, str, str, int]]:
    """(metric, A, B, delta, change, verdict) for each metric either side has; verdict +1 better."""
    rows = []
    for key in [k for k in COMPARE_KEYS if k in a.metrics or k in b.metrics]:
        va, vb = number(a.metrics.get(key)), number(b.metrics.get(key))
        m = metric(key)
        delta = change = "-"
        verdict = 0
        if va is not None and vb is not None:
            d = (vb - va) * m.scale
            delta = f"{d:+,.1f} pts" if m.unit == "%" else m.fmt.replace("{:", "{:+").format(d)
            change = f"{(vb / va - 1) * 100:+.1f}%" if va else "-"
            verdict = (
                (1 if (vb - va) * m.better > 0 else -1) if m.better and abs(vb - va) > 1e-12 else 0
            )
            if not any(c in "123456789" for c in delta):  # moved less than the shown precision
                delta, verdict = "0", 0
        rows.append(
            (
                header(key),
                fmt(key, a.metrics.get(key)),
                fmt(key, b.metrics.get(key)),
                delta,
                change,
                verdict,
            )
        )
    return rows


def terminal_table(a: Arm, b: Arm) -> str:
    head = ("metric", f"A: {a.label}", f"B: {b.label}", "B - A", "change", "")
    body = [(*r[:5], {1: "better", -1: "worse", 0: ""}[r[5]]) for r in delta_rows(a, b)]
    widths = [max(len(str(row[i])) for row in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [head, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def _html_table(a: Arm, b: Arm) -> str:
    cls = {1: "good", -1: "bad", 0: ""}
    rows = "".join(
        f"<tr><td>{escape(r[0])}</td><td>{escape(r[1])}</td><td>{escape(r[2])}</td>"
        f'<td class="{cls[r[5]]}">{escape(r[3])}</td><td class="{cls[r[5]]}">{escape(r[4])}</td></tr>'
        for r in delta_rows(a, b)
    )
    return (
        f'<h2>A: {escape(a.label)} &nbsp;vs&nbsp; B: {escape(b.label)}</h2><div class="scroll"><table><thead>'
        f"<tr><th>metric</th><th>A</th><th>B</th><th>B &minus; A</th><th>change</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
    )


def _sided(pairs: list[tuple[Arm, Arm]]) -> list[Arm]:
    """Copies of the arms labelled by side, so overlaid plots say which is A and which is B."""
    out = []
    for a, b in pairs:
        for side, arm in (("A", a), ("B", b)):
            c = copy.copy(arm)
            c.label = f"{side}: {arm.label}"
            out.append(c)
    return out


def compare_html(pairs: list[tuple[Arm, Arm]], spec_a: str, spec_b: str) -> str:
    arms = _sided(pairs)
    with style():
        figs = [
            plots_latency.cdf_figure(arms, "ttft"),
            plots_latency.cdf_figure(arms, "e2e"),
            plots_cluster.queue_figure(arms),
            plots_cluster.hit_rate_figure(arms),
        ]
    title = f"kvsched compare: {spec_a} vs {spec_b}"
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{escape(title)}</h1>"
        '<p class="lede">Green is better for B, red is worse; ratios are B / A.</p>'
        + "".join(_html_table(a, b) for a, b in pairs)
        + "<h2>Plots</h2>"
        + "".join(f for f in figs if f)
        + "</body></html>\n"
    )


COMPARE_SIGNATURE = "<title>kvsched compare"  # an existing --out is replaced only if it has it


def run_compare(spec_a: str, spec_b: str, out: str | None) -> int:
    frames = out is not None
    if out:
        check_output(Path(out), "--out", signature=COMPARE_SIGNATURE)  # before the work
    pairs = pair_arms(parse_side(spec_a, frames), parse_side(spec_b, frames))
    print("\n\n".join(terminal_table(a, b) for a, b in pairs))
    if out:
        html = compare_html(pairs, spec_a, spec_b)
        write_output(Path(out), html, "--out", signature=COMPARE_SIGNATURE)
        print(f"compare page: {out}")
    return 0
