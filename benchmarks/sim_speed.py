"""Simulator speed (issue 18): the Vidur-comparable case, the default study, report rendering, a
256-node run, the price of one step, and SimPy events per request.

    python -m benchmarks.sim_speed              # everything (the 256-node run takes minutes)
    python -m benchmarks.sim_speed --quick      # no 256-node run, one repeat
    python -m benchmarks.sim_speed --exact-steps   # the same with the reference driver
    python -m benchmarks.sim_speed --quick --large-nodes 32 --large-seconds 150   # iterating

Each timed run is a fresh process (`kvsched run`, or a small script for the 256-node point), so
its peak RSS is its own; times are wall seconds, medians over repeats. The machine is shared:
the load average is printed with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import yaml

from kvsched.arm_pool import default_workers

ROOT = Path(__file__).resolve().parents[1]
VIDUR_CASE = ROOT / "studies" / "vidur_case.yaml"
VIDUR_SIMULATED_S = 1100.0  # its duration_s
LARGE = {  # 256 nodes, the seed workload at 25 closed-loop clients per node, 10 simulated minutes
    "duration_s": 600.0,
    "cluster": {"num_nodes": 256},
    "workload": {"name": "seed", "params": {"num_clients": 25 * 256}},
}
POINT = """
import json, resource, sys, time
from kvsched.experiment import resolve_arms, run_arm
raw = json.loads(sys.argv[1])
cfg = resolve_arms(raw, ["engine"])["engine"]
t, c = time.perf_counter(), time.process_time()
cluster, summary, _, _ = run_arm(cfg, "engine", show_progress=False)
wall, cpu = time.perf_counter() - t, time.process_time() - c
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "completed": summary["completed"], "requests": len(cluster.sequences),
                  "steps": sum(n.num_steps for n in cluster.nodes),
                  "span_steps": sum(getattr(n, "num_span_steps", 0) for n in cluster.nodes),
                  "events": cluster.env.num_events}))
"""


def kvsched_run(config: Path, out: Path, extra: list[str]) -> dict:
    """One `kvsched run` in a fresh process: run_info.json's wall_s, and the process's CPU
    seconds (user + system; the machine is shared, so CPU time is the steadier measure) and
    peak RSS."""
    cmd = [sys.executable, "-m", "kvsched.cli", "run", "--config", str(config), "--out", str(out)]
    cmd += ["--no-report", "--quiet", *extra]
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert child.stderr is not None
    err = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {child.returncode}: {err.decode()[-400:]}")
    info = json.loads((out / "run_info.json").read_text())
    return {
        "wall_s": info["wall_s"],
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }


def vidur_case(repeats: int, extra: list[str], work: Path) -> None:
    runs = [kvsched_run(VIDUR_CASE, work / f"vidur{i}", extra) for i in range(repeats)]
    walls = [r["wall_s"] for r in runs]
    print(
        f"Vidur case (4,096 Azure conv requests at 4 req/s, 2 x llama-3-8b on H200, paged): "
        f"{statistics.median(walls):.2f} s wall (median of {repeats}: "
        f"{', '.join(f'{w:.2f}' for w in walls)}); whole process "
        f"{statistics.median(r['cpu_s'] for r in runs):.2f} s CPU, peak RSS "
        f"{max(r['peak_rss_mb'] for r in runs):.0f} MB; "
        f"{VIDUR_SIMULATED_S / statistics.median(walls):.0f} simulated s per wall s; goal <= 0.4 s"
    )


def events_per_request(exact: bool) -> None:
    """Node steps and SimPy events per request on the Vidur case, in this process."""
    from kvsched.experiment import resolve_arms, run_arm

    raw = yaml.safe_load(VIDUR_CASE.read_text())
    for flag in sorted({exact, True}):
        cfg = resolve_arms({**raw, "exact_steps": flag}, ["paged"])["paged"]
        cpu = time.process_time()
        cluster, _, _, _ = run_arm(cfg, "paged", show_progress=False)
        cpu = time.process_time() - cpu
        n = len(cluster.sequences)
        steps = sum(x.num_steps for x in cluster.nodes)
        spans = sum(getattr(x, "num_span_steps", 0) for x in cluster.nodes)
        events = cluster.env.num_events
        driver = "exact_steps" if flag else "default driver"
        print(
            f"  {driver:>14}: {steps / n:.1f} node steps per request "
            f"({spans / max(1, steps):.0%} inside decode spans), "
            f"{events / n:.1f} SimPy events per request, {cpu:.2f} s CPU (run_arm)"
        )


def default_study(extra: list[str], work: Path, report: bool) -> Path:
    """The built-in arms (5 x 20 simulated minutes) via `kvsched run` on an empty config: in one
    process, then (on a machine of 2 or more CPUs) one process per arm as `kvsched run` does by
    default."""
    config = work / "default.yaml"
    config.write_text("{}\n")
    out = work / "default"
    r = kvsched_run(config, out, [*extra, "--workers", "1"])
    print(
        f"default study (5 arms x 20 simulated min), --workers 1: {r['wall_s']:.1f} s wall, "
        f"whole process {r['cpu_s']:.1f} s CPU, peak RSS {r['peak_rss_mb']:.0f} MB; "
        f"{5 * 1200 / r['wall_s']:.0f} simulated arm-s per wall s; goal <= 5 s"
    )
    workers = default_workers(5)
    if workers > 1:  # the arms in worker processes (their CPU is not the parent's: wall only)
        r = kvsched_run(config, work / "default-workers", extra)
        print(
            f"default study, --workers {workers} (the default here): {r['wall_s']:.1f} s wall; "
            f"{5 * 1200 / r['wall_s']:.0f} simulated arm-s per wall s; goal <= 5 s"
        )
    if report:
        from reports.html import write_report

        times, cpus = [], []
        for _ in range(3):
            t, c = time.perf_counter(), _cpu_s()
            write_report([out], work / "report.html")
            times.append(time.perf_counter() - t)
            cpus.append(_cpu_s() - c)
        print(
            f"report of the default study: {statistics.median(times):.2f} s wall, "
            f"{statistics.median(cpus):.2f} s CPU (medians of 3); goal <= 2 s"
        )
    return out


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished children (the report's figure workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def large_run(exact: bool, nodes: int, seconds: float) -> None:
    raw = {
        **LARGE,
        "duration_s": seconds,
        "cluster": {"num_nodes": nodes},
        "workload": {"name": "seed", "params": {"num_clients": 25 * nodes}},
        "exact_steps": exact,
    }
    out = subprocess.run(
        [sys.executable, "-c", POINT, json.dumps(raw)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"{nodes} nodes x 25 clients x {seconds:g} simulated s, engine arm: {r['wall_s']:.1f} s wall "
        f"({r['cpu_s']:.1f} s CPU), "
        f"peak RSS {r['peak_rss_mb']:.0f} MB, {r['completed']} completed, "
        f"{r['events'] / max(1, r['requests']):.1f} SimPy events per request "
        f"({r['steps'] / max(1, r['requests']):.1f} steps, "
        f"{r['span_steps'] / max(1, r['steps']):.0%} inside decode spans); "
        f"{seconds / r['wall_s']:.2f} simulated s per wall s; goal (256 x 600 s) <= 60 s, <= 2 GB"
    )


def step_pricing() -> None:
    """Microseconds per step price (`shape_time_s` of a Step.shape()) on the H200 table."""
    from sim.config import parse_config
    from sim.latency import StepShape, make_latency_model

    cfg = parse_config({"model": "llama-3-8b", "gpu": "h200", "node": {"num_gpus": 1, "tp": 1}})
    lat = make_latency_model(cfg.model, cfg.gpu, 1)
    shapes = [
        StepShape([], [], 24, 24 * 1500 + k)
        for k in range(64)  # decode-only, contexts growing
    ] + [StepShape([512], [1024 + k], 16, 16 * 900 + k) for k in range(64)]  # one prefill chunk
    n = 20_000
    runs = timeit.repeat(  # CPU time: on a shared machine wall time counts others' turns
        lambda: [lat.shape_time_s(s) for s in shapes],
        number=n // len(shapes),
        repeat=7,
        timer=time.process_time,
    )
    us = sorted(r / n * 1e6 for r in runs)
    print(
        f"step pricing: {us[0]:.2f} us CPU per step best of 7, {us[3]:.2f} median ({lat.name}); "
        "goal <= 5 us"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="no 256-node run, one repeat")
    ap.add_argument("--exact-steps", action="store_true", help="the reference driver")
    ap.add_argument("--no-report", action="store_true", help="skip the report render timing")
    ap.add_argument("--large-nodes", type=int, default=256, help="nodes of the large run")
    ap.add_argument("--large-seconds", type=float, default=600.0, help="its simulated seconds")
    ap.add_argument(
        "--only",
        choices=["price", "vidur", "events", "default", "large"],
        nargs="*",
        help="run only these parts",
    )
    args = ap.parse_args()
    extra = ["--exact-steps"] if args.exact_steps else []
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="sim-speed-") as tmp:
        work = Path(tmp)
        only = set(args.only or ["price", "vidur", "events", "default", "large"])
        if "price" in only:
            step_pricing()
        if "vidur" in only:
            vidur_case(1 if args.quick else 3, extra, work)
        if "events" in only:
            events_per_request(args.exact_steps)
        if "default" in only:
            default_study(extra, work, report=not args.no_report)
        if "large" in only and (not args.quick or args.only):
            large_run(args.exact_steps, args.large_nodes, args.large_seconds)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
