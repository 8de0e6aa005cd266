"""Sweep scaling: wall time of the same sweep with 1 and 2 local workers (and on local Ray).

    python -m benchmarks.sweep_scaling                                # studies/sweep_seed_48.yaml
    python -m benchmarks.sweep_scaling studies/sweep_ci.yaml --ray    # also time --backend ray

Each run is the real command (`kvsched sweep ... --restart`) in a fresh process, timed end to end
(start-up, worker spawn, every point, table and report). The tables of all runs must be equal
apart from wall_s; the script fails otherwise. The sum of per-point wall times (the serial work)
is printed beside the elapsed time, so the speed-up can be read against the ideal.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd


def timed_sweep(sweep: str, out: Path, backend: str, workers: int) -> tuple[float, pd.DataFrame]:
    cmd = [sys.executable, "-m", "sim.cli", "sweep", sweep, "--out", str(out), "--backend", backend,
           "--workers", str(workers), "--restart", "--quiet", "--no-report"]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, pd.read_csv(out / "sweep.csv")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", nargs="?", default="studies/sweep_seed_48.yaml")
    ap.add_argument("--ray", action="store_true", help="also time --backend ray (local instance, 2 CPUs)")
    args = ap.parse_args()
    runs = [("local", 1), ("local", 2)] + ([("ray", 2)] if args.ray else [])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend, workers in runs:
            wall, table = timed_sweep(args.sweep, Path(tmp) / f"{backend}{workers}", backend, workers)
            results[(backend, workers)] = (wall, table)
    base_wall, base_table = results[("local", 1)]
    reference = base_table.drop(columns=["wall_s"])
    print(f"sweep {args.sweep}: {len(base_table)} points, {int((base_table.status == 'ok').sum())} ok")
    print("| backend | workers | wall (s) | speed-up vs 1 worker | sum of point wall (s) | table equal |")
    print("|---|---|---|---|---|---|")
    for (backend, workers), (wall, table) in results.items():
        equal = table.drop(columns=["wall_s"]).equals(reference)
        print(f"| {backend} | {workers} | {wall:.1f} | {base_wall / wall:.2f}x | {table.wall_s.sum():.1f} | "
              f"{'yes' if equal else 'NO'} |")
        if not equal:
            sys.exit(f"{backend} x{workers}: the table differs from local x1")


if __name__ == "__main__":
    main()
