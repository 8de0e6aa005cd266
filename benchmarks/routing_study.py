"""Print a routing study's per-arm table from its run directory (summary.json only).

    kvsched run --config studies/routing.yaml --out runs/routing
    python -m benchmarks.routing_study runs/routing

Columns: prefix hit rate, mean / P99 TTFT, output throughput, load imbalance (max / mean over nodes
of the time-averaged load), busy imbalance (max / mean of the time each node spent computing), the
busiest node's share of the requests, and the mean / P99 wait for a router decision.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

COLUMNS = [
    ("prefix_hit_rate", "hit rate", "{:.1%}"),
    ("mean_ttft_ms", "mean TTFT ms", "{:.0f}"),
    ("p99_ttft_ms", "P99 TTFT ms", "{:.0f}"),
    ("output_throughput", "out tok/s", "{:.0f}"),
    ("load_imbalance", "load max/mean", "{:.2f}"),
    ("busy_imbalance", "busy max/mean", "{:.2f}"),
    ("max_node_request_share", "top node share", "{:.1%}"),
    ("mean_router_wait_ms", "router wait ms", "{:.3f}"),
    ("p99_router_wait_ms", "P99 router wait ms", "{:.3f}"),
]


def table(summary: dict) -> str:
    head = ["arm", *(label for _, label, _ in COLUMNS)]
    rows = [
        [arm, *("-" if m.get(k) is None else f.format(m[k]) for k, _, f in COLUMNS)]
        for arm, m in summary["arms"].items()
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows]]
    lines.insert(1, "-|-".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", help="a run directory written by kvsched run")
    args = ap.parse_args()
    print(table(json.loads((Path(args.run_dir) / "summary.json").read_text())))


if __name__ == "__main__":
    main()
