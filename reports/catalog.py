"""What the reports know about each summary metric: label, unit, format and which way is better.

Metrics not listed here still appear (in the report's "all metrics" table) with a plain format;
listing one only gives it a nicer label and a direction for "best" marks and deltas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Metric:
    key: str
    label: str
    unit: str  # shown in headers; "" for counts and ratios
    fmt: str  # format of the displayed value (after `scale`)
    better: int  # +1 higher is better, -1 lower is better, 0 neither
    scale: float = 1.0  # displayed = stored * scale (bytes -> GB, share -> percent)


METRICS = {
    m.key: m
    for m in [
        Metric("output_throughput", "output throughput", "tok/s", "{:,.0f}", +1),
        Metric("request_throughput", "request throughput", "req/s", "{:.2f}", +1),
        Metric("total_token_throughput", "total token throughput", "tok/s", "{:,.0f}", +1),
        Metric("p50_ttft_ms", "P50 TTFT", "ms", "{:,.0f}", -1),
        Metric("p99_ttft_ms", "P99 TTFT", "ms", "{:,.0f}", -1),
        Metric("mean_ttft_ms", "mean TTFT", "ms", "{:,.0f}", -1),
        Metric("p50_tpot_ms", "P50 TPOT", "ms", "{:,.1f}", -1),
        Metric("p99_tpot_ms", "P99 TPOT", "ms", "{:,.1f}", -1),
        Metric("mean_tpot_ms", "mean TPOT", "ms", "{:,.1f}", -1),
        Metric("p50_e2el_ms", "P50 E2E", "ms", "{:,.0f}", -1),
        Metric("p99_e2el_ms", "P99 E2E", "ms", "{:,.0f}", -1),
        Metric("mean_e2el_ms", "mean E2E", "ms", "{:,.0f}", -1),
        # Unfinished requests counted at their age at the end: lower bounds of the true P99s.
        Metric("p99_ttft_censored_ms", "P99 TTFT, censored lower bound", "ms", "{:,.0f}", -1),
        Metric("p99_e2el_censored_ms", "P99 E2E, censored lower bound", "ms", "{:,.0f}", -1),
        Metric("prefix_hit_rate", "prefix hit rate", "%", "{:.1f}", +1, 100.0),
        Metric("peak_kv_bytes", "peak KV", "GB", "{:,.0f}", -1, 1e-9),
        Metric("kv_utilization", "KV utilisation", "%", "{:.1f}", +1, 100.0),
        Metric("oom_events", "OOM events", "", "{:,.0f}", -1),
        Metric("preemptions", "preemptions", "", "{:,.0f}", -1),
        Metric("completed", "completed", "", "{:,.0f}", +1),
        Metric("failed", "failed", "", "{:,.0f}", -1),
        Metric("unfinished", "unfinished at the end", "", "{:,.0f}", -1),
        Metric("false_hits", "false hits", "", "{:,.0f}", 0),
        Metric("wrong_reuse_tokens", "wrong-reuse tokens", "", "{:,.0f}", -1),
        Metric("use_after_free", "use-after-free", "", "{:,.0f}", -1),
        Metric("evicted_pages", "evicted pages", "", "{:,.0f}", -1),
        Metric("protected_pages", "protected pages", "", "{:,.0f}", 0),
        Metric("load_imbalance", "load imbalance (max/mean)", "", "{:.2f}", -1),
        Metric("network_bytes", "network", "GB", "{:,.2f}", -1, 1e-9),
    ]
}

# The headline table of every report, in this order.
HEADLINE = [
    "output_throughput",
    "request_throughput",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "p50_tpot_ms",
    "p99_tpot_ms",
    "p50_e2el_ms",
    "p99_e2el_ms",
    "prefix_hit_rate",
    "peak_kv_bytes",
    "oom_events",
    "preemptions",
]


def metric(key: str) -> Metric:
    """The catalogue entry, or a plain one for a metric another feature added."""
    return METRICS.get(key) or Metric(key, key.replace("_", " "), "", "{:,.4g}", 0)


def number(value) -> float | None:
    """A finite float, or None for missing, null, NaN and non-numeric values."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def fmt(key: str, value) -> str:
    """Display text of a stored metric value; "-" when it is missing."""
    v = number(value)
    if v is None:
        return "-" if value is None else str(value)
    m = metric(key)
    return m.fmt.format(v * m.scale)


def header(key: str) -> str:
    m = metric(key)
    return f"{m.label} ({m.unit})" if m.unit else m.label


def best_value(key: str, values: list) -> float | None:
    """The best of the arms' values, or None when the metric has no direction or all tie."""
    nums = [v for v in (number(x) for x in values) if v is not None]
    m = metric(key)
    if not m.better or len({m.fmt.format(v * m.scale) for v in nums}) < 2:
        return None  # no direction, or every arm shows the same value
    return max(nums) if m.better > 0 else min(nums)


def ratio(value, reference) -> float | None:
    v, r = number(value), number(reference)
    if v is None or r is None or r == 0:
        return None
    return v / r
