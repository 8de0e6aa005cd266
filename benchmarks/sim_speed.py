"""Simulator speed: the default study's wall time, and how wall time and memory grow.

    python -m benchmarks.sim_speed            # default study + node and duration scaling
    python -m benchmarks.sim_speed --quick    # shorter scaling points

Each scaling point runs in a fresh process, so its peak RSS is its own. Load per node is held
constant (25 closed-loop clients per node, as in the default study's 100 clients on 4 nodes).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

POINT = """
import json, resource, sys, time
from kvsched.experiment import resolve_arms, run_arm
raw = json.loads(sys.argv[1])
cfg = resolve_arms(raw, ["engine"])["engine"]
t = time.perf_counter()
_, summary, _, _ = run_arm(cfg, "engine", show_progress=False)
wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "completed": summary["completed"]}))
"""


def run_point(num_nodes: int, duration_s: float) -> dict:
    raw = {
        "duration_s": duration_s,
        "cluster": {"num_nodes": num_nodes},
        "workload": {"name": "seed", "params": {"num_clients": 25 * num_nodes}},
    }
    out = subprocess.run(
        [sys.executable, "-c", POINT, json.dumps(raw)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def default_study() -> None:
    from kvsched.experiment import resolve_arms, run_arm

    total, simulated = 0.0, 0.0
    for arm, cfg in resolve_arms({}).items():
        t = time.perf_counter()
        run_arm(cfg, arm, show_progress=False)
        wall = time.perf_counter() - t
        total += wall
        simulated += cfg.duration_s
        print(
            f"  {arm:>14}: {wall:6.1f} s wall, {cfg.duration_s / wall:6.1f} simulated s per wall s"
        )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"default study (4 arms x 20 simulated min): {total:.1f} s wall, "
        f"{simulated / total:.1f} simulated s per wall s, peak RSS {rss:.0f} MB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    default_study()
    base = 150.0 if args.quick else 300.0
    print("\nscaling (engine arm, 25 clients per node):")
    print(f"{'nodes':>5} {'sim s':>6} {'wall s':>7} {'peak MB':>8} {'completed':>9}")
    points = [(1, base), (8, base), (32, base), (4, base), (4, 2 * base), (4, 4 * base)]
    for nodes, duration in points:
        r = run_point(nodes, duration)
        print(
            f"{nodes:5d} {duration:6.0f} {r['wall_s']:7.1f} {r['peak_rss_mb']:8.0f} {r['completed']:9d}"
        )


if __name__ == "__main__":
    main()
