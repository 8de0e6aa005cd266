"""Sweep scaling: wall time of the same sweep with 1 and 2 local workers (and on local Ray).

    python -m benchmarks.sweep_scaling                                # studies/sweep_seed_48.yaml
    python -m benchmarks.sweep_scaling studies/sweep_ci.yaml --ray    # also time --backend ray

Each run is the real command (`kvsched sweep ... --restart`) in a fresh process, timed end to end
(start-up, worker spawn, every point, table and report). The tables of all runs must be equal
apart from wall_s; the script fails otherwise. The sum of per-point wall times (the serial work)
is printed beside the elapsed time, with the CPU seconds used and the machine's load average, so
the speed-up can be read against the ideal and against what else the machine was running.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd


def timed_sweep(sweep: str, out: Path, backend: str, workers: int) -> dict:
    """Elapsed wall time, CPU seconds of the command and its workers, the machine's load, table."""
    cmd = [
        sys.executable,
        "-m",
        "kvsched.cli",
        "sweep",
        sweep,
        "--out",
        str(out),
        "--backend",
        backend,
        "--workers",
        str(workers),
        "--restart",
        "--quiet",
        "--no-report",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Ray's own processes are not children of the command once detached, so for Ray this counts
    # only the driver and the workers it waited for.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall": wall,
        "cpu": cpu,
        "load": os.getloadavg()[0],
        "table": pd.read_csv(out / "sweep.csv"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", nargs="?", default="studies/sweep_seed_48.yaml")
    ap.add_argument(
        "--ray", action="store_true", help="also time --backend ray (local instance, 2 CPUs)"
    )
    args = ap.parse_args()
    runs = [("local", 1), ("local", 2)] + ([("ray", 2)] if args.ray else [])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend, workers in runs:
            results[(backend, workers)] = timed_sweep(
                args.sweep, Path(tmp) / f"{backend}{workers}", backend, workers
            )
    base = results[("local", 1)]
    reference = base["table"].drop(columns=["wall_s"])
    print(
        f"sweep {args.sweep}: {len(reference)} points, {int((reference.status == 'ok').sum())} ok; "
        f"{os.cpu_count()} cores"
    )
    print(
        "| backend | workers | wall (s) | speed-up vs 1 worker | sum of point wall (s) | CPU (s) | "
        "load avg (1 min, at end) | table equal |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (backend, workers), r in results.items():
        equal = r["table"].drop(columns=["wall_s"]).equals(reference)
        print(
            f"| {backend} | {workers} | {r['wall']:.1f} | {base['wall'] / r['wall']:.2f}x | "
            f"{r['table'].wall_s.sum():.1f} | {r['cpu']:.1f} | {r['load']:.1f} | {'yes' if equal else 'NO'} |"
        )
        if not equal:
            sys.exit(f"{backend} x{workers}: the table differs from local x1")


if __name__ == "__main__":
    main()
