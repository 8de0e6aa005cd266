"""Report render time and size on a large run: 8 nodes, 20 simulated minutes, 5 arms.

    python -m benchmarks.report_render                 # simulate the run (minutes), then render
    python -m benchmarks.report_render --run-dir DIR   # render an existing run directory

    python -m benchmarks.report_render --run-dir DIR --workers 1   # in this process only

The README speed table's "report of the default study" row renders the run directory of the
default study (`kvsched run --no-report --out DIR`), paired with a clean export of the commit
before (`git archive`), interleaved, with --workers 1 and 2.

The run is the article's seed workload (100 closed-loop clients) on 8 nodes with the four
built-in arms plus `engine` with least-loaded routing. Rendering is timed
three times in this process (wall and CPU seconds); the best wall time is reported, with the
file size and the per-figure sizes. CPU seconds count the forked workers that build the figures
(reports/pieces.py) as well as this process.
"""

from __future__ import annotations

import argparse
import re
import resource
import time
from pathlib import Path

LARGE_RUN = {
    "name": "report-large",
    "seed": 0,
    "duration_s": 1200,
    "cluster": {"num_nodes": 8},
    "workload": {"name": "seed"},
    "arms": {
        "openclaw": {},
        "paged": {},
        "paged+prefix": {},
        "engine": {},
        "engine+least_loaded": {
            "cache": {"mechanism": "paged", "prefix_cache": True},
            "policies": {"routing": {"name": "least_loaded", "params": {}}},
        },
    },
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--run-dir", help="existing run directory (default: simulate runs/report-large)"
    )
    ap.add_argument("--out", default="runs/report-large.html")
    ap.add_argument("--workers", type=int, help="processes building figures (default: per core)")
    args = ap.parse_args()
    run_dir = Path(args.run_dir or "runs/report-large")
    if not args.run_dir:
        from kvsched.experiment import run_experiment

        t = time.perf_counter()
        run_experiment(LARGE_RUN, run_dir, show_progress=True, write_report=False)
        print(f"simulated in {time.perf_counter() - t:.0f} s")
    from reports.html import write_report

    times = []
    for _ in range(3):
        wall, cpu = time.perf_counter(), _cpu_s()
        write_report([run_dir], Path(args.out), workers=args.workers)
        times.append((time.perf_counter() - wall, _cpu_s() - cpu))
    text = Path(args.out).read_text(encoding="utf-8")
    best = min(times)
    print(
        f"report: {args.out}: {len(text.encode()) / 1e6:.2f} MB, render {best[0]:.2f} s wall "
        f"({best[1]:.2f} s CPU), best of 3; all (wall, CPU): "
        + ", ".join(f"({w:.2f}, {c:.2f})" for w, c in times)
    )
    for m in re.finditer(r'<figure id="([^"]+)".*?</figure>', text, re.S):
        print(f"  {m.group(1):<28} {len(m.group(0).encode()) / 1e3:7.0f} kB")


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished children (the figure workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    main()
