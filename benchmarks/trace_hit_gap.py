"""Where a trace replay's prefix hit rate goes: the simulator next to request-order bounds.

    .venv/bin/python benchmarks/trace_hit_gap.py RUN_DIR

For each arm of a finished `kvsched run` of a trace workload, prints (token hit rates):
  infinite          one cache that never evicts (the `trace stats` bound)
  LRU cluster       one LRU holding the whole cluster's KV pool
  LRU node          one LRU holding one node's KV pool
  routed infinite   per-node caches that never evict, fed the arm's actual routing
  routed LRU        per-node LRUs of one node's pool each, fed the arm's actual routing
  simulator         the run's prefix_hit_rate
  moved             requests routed away from a node that held more of their prefix (never-evicting
                    caches), with the median time since that prefix was last used
The steps from left to right separate what is lost to splitting traffic across nodes (routing),
to capacity (eviction), and to what only a timed replay has (KV of running requests occupying the
pool, requests arriving before their prefix is computed, 16-token page granularity).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from sim.config import parse_config
from workloads.trace import cached_trace, window
from workloads.trace_stats import Chains, hit_counts, prefix_chains, totals


def subset(chains: Chains, rows: np.ndarray) -> Chains:
    pick = rows.tolist()
    return Chains(
        [chains.nodes[i] for i in pick],
        [chains.tokens[i] for i in pick],
        [chains.input_length[i] for i in pick],
        chains.num_nodes,
    )


def routed(chains: Chains, node_of_row: np.ndarray, capacity: float | None) -> int:
    """Hit tokens of per-node caches, each fed the requests routed to it, in trace order."""
    return sum(
        hit_counts(subset(chains, np.flatnonzero(node_of_row == n)), capacity)[0]
        for n in np.unique(node_of_row[node_of_row >= 0])
    )


def moved(
    chains: Chains, node_of_row: np.ndarray, arrival_s: np.ndarray
) -> tuple[int, float | None]:
    """Requests routed to a node holding less of their prefix than some other node did (caches
    that never evict): how many, and the median seconds since the prefix was last used."""
    last_use: dict[int, int] = {}  # prefix-tree node -> the last request that held it, any node
    held: set[tuple[int, int]] = set()  # (cluster node, prefix-tree node)
    gaps = []
    for i, path in enumerate(chains.nodes):
        here = int(node_of_row[i])
        depth_any = next((k for k, n in enumerate(path) if n not in last_use), len(path))
        depth_here = next((k for k, n in enumerate(path) if (here, n) not in held), len(path))
        if here >= 0 and depth_here < depth_any:
            gaps.append(arrival_s[i] - arrival_s[last_use[path[depth_any - 1]]])
        for n in path:
            last_use[n] = i
            if here >= 0:
                held.add((here, n))
    return len(gaps), float(np.median(gaps)) if gaps else None


def arm_row(run: Path, arm: str, metrics: dict) -> dict:
    cfg = parse_config(json.loads((run / arm / "config.json").read_text()))
    p = cfg.workload.params
    trace = window(
        cached_trace(p["path"], p["format"], p.get("skip_bad_rows", False)),
        p.get("start_s", 0.0),
        p.get("end_s"),
        p.get("max_requests"),
    )
    chains = prefix_chains(trace)
    total = totals(chains)[0]
    node_pool = cfg.kv_capacity_bytes // cfg.model.kv_bytes_per_token  # tokens
    requests = pd.read_csv(run / arm / "requests.csv")
    row_of_id = {int(r): i for i, r in enumerate(trace.request_id)}
    node_of_row = np.full(len(trace), -1)
    for rid, node in zip(requests.request_id, requests.node, strict=True):
        node_of_row[row_of_id[int(rid)]] = node
    return {
        "arm": arm,
        "node_pool_tokens": int(node_pool),
        "nodes": cfg.cluster.num_nodes,
        "infinite": hit_counts(chains)[0] / total,
        "lru_cluster": hit_counts(chains, node_pool * cfg.cluster.num_nodes)[0] / total,
        "lru_node": hit_counts(chains, node_pool)[0] / total,
        "routed_infinite": routed(chains, node_of_row, None) / total,
        "routed_lru": routed(chains, node_of_row, node_pool) / total,
        "simulator": metrics["prefix_hit_rate"],
        "moved": moved(chains, node_of_row, trace.arrival_s),
        "failed": metrics.get("failed", 0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    args = ap.parse_args()
    summary = json.loads((args.run / "summary.json").read_text())
    rows = [arm_row(args.run, arm, m) for arm, m in summary["arms"].items()]
    cols = ["infinite", "lru_cluster", "lru_node", "routed_infinite", "routed_lru", "simulator"]
    print(
        f"node pool {rows[0]['node_pool_tokens']:,} tokens x {rows[0]['nodes']} nodes; token hit rates"
    )
    print("| arm | " + " | ".join(cols) + " | failed | moved (median gap s) |")
    print("|---|" + "---:|" * (len(cols) + 2))
    for r in rows:
        count, gap = r["moved"]
        gap_text = f"{gap:.0f}" if gap is not None else "-"
        print(
            f"| {r['arm']} | "
            + " | ".join(f"{r[c]:.1%}" for c in cols)
            + f" | {r['failed']} | {count} ({gap_text}) |"
        )


if __name__ == "__main__":
    main()
