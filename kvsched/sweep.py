"""`kvsched sweep SWEEP.yaml --out DIR`: one simulation per point, on a process pool or Ray.

The plan is checked in full before anything runs (sim/sweep_spec.py); results are journalled
point by point (sim/sweep_store.py), so Ctrl-C or SIGTERM stops cleanly and the same command
resumes. Exit status: 0 all points ok, 1 some failed (see the table's error column), 2 bad input,
130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP. The directory follows kvsched/outdir.py's
contract: marked `sweep`, locked while written, never made inside a directory kvsched did not make.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from kvsched.arm_pool import check_workers
from kvsched.outdir import check_writable, make_dir, output_lock, remove_created
from kvsched.sweep_backends import make_backend
from kvsched.sweep_spec import Point, Sweep, load_sweep
from kvsched.sweep_store import FAILED, TABLE_CSV, SweepStore
from sim.config import ConfigError

TABLE_EVERY_S = 1.0  # rebuild sweep.csv at most this often while points finish (and at the end)


@dataclass
class SweepOutcome:
    table: pd.DataFrame
    num_points: int
    num_done: int
    num_failed: int
    stop_signal: int | None  # the signal that stopped the sweep, None if it ran to the end


class _StopOnSignal:
    """SIGINT/SIGTERM/SIGHUP set a flag the backends poll; a second SIGINT interrupts at once."""

    def __init__(self):
        self.signum: int | None = None
        self.previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.signum = signum
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def __call__(self) -> bool:
        return self.signum is not None


def _task(point: Point) -> dict:
    """What a worker needs to simulate a point (plain JSON types: it travels to other processes)."""
    keys = ("point_id", "index", "arm", "values", "config")
    return {k: getattr(point, k) for k in keys}


def run_sweep(
    sweep: Sweep,
    out_dir: str | Path,
    backend: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    show_progress: bool = True,
    restart: bool = False,
) -> SweepOutcome:
    out = Path(os.path.abspath(out_dir))
    check_writable(out, "sweep")
    created = make_dir(out.parent, "parent")
    try:
        with output_lock(out):
            return _run_locked(
                SweepStore(out, sweep), backend, workers, ray_address, show_progress, restart
            )
    except BaseException:
        remove_created(created)
        raise


def _run_locked(
    store: SweepStore,
    backend: str,
    workers: int | None,
    ray_address: str | None,
    show_progress: bool,
    restart: bool,
) -> SweepOutcome:
    sweep = store.sweep
    check_writable(store.dir, "sweep")  # again, now that no other kvsched writes it
    store.read(restart)
    tasks = [_task(p) for p in sweep.points if not store.is_done(p)]
    # The backend first: a Ray cluster that cannot be reached fails before --out is touched.
    pool = make_backend(backend, workers or os.cpu_count() or 1, ray_address) if tasks else None
    stop = _StopOnSignal()
    bar = None
    try:
        store.open(restart)
        done, failed = store.counts()
        bar = tqdm(
            total=len(sweep.points),
            initial=done,
            desc=sweep.spec.name,
            unit="pt",
            disable=not show_progress,
            dynamic_ncols=True,
            postfix={"failed": failed},
        )
        with stop:
            written_s = time.monotonic()
            for record in pool.run(tasks, stop) if pool else ():
                store.append(record)  # the journal is what makes the point durable
                if time.monotonic() - written_s >= TABLE_EVERY_S:
                    store.write_table()
                    written_s = time.monotonic()
                bar.update(1)
                bar.set_postfix(failed=store.counts()[1])
    finally:
        if pool is not None:
            pool.close()
        if bar is not None:
            bar.close()
            table = store.write_table(parquet=True)
    done, failed = store.counts()
    return SweepOutcome(table, len(sweep.points), done, failed, stop.signum)


def cmd_sweep(args) -> int:
    sweep = load_sweep(args.sweep)
    check_backend_args(args)
    outcome = run_sweep(
        sweep,
        args.out,
        args.backend,
        args.workers,
        args.ray_address,
        show_progress=not args.quiet,
        restart=args.restart,
    )
    return finish(outcome, sweep, Path(args.out), write_report=not args.no_report)


def check_backend_args(args) -> None:
    check_workers(args.workers)
    if args.ray_address and args.backend != "ray":
        raise ConfigError("--ray-address: only with --backend ray")


def finish(outcome: SweepOutcome, sweep: Sweep, out: Path, write_report: bool) -> int:
    """Print the outcome (and write the report); the exit status."""
    if outcome.stop_signal is not None:
        name = signal.Signals(outcome.stop_signal).name
        print(
            f"interrupted by {name}: {outcome.num_done} of {outcome.num_points} points done; "
            "run the same command again to resume"
        )
        return 128 + outcome.stop_signal
    print(
        f"sweep {sweep.spec.name}: {outcome.num_done} of {outcome.num_points} points ok, "
        f"{outcome.num_failed} failed; table: {out / TABLE_CSV}"
    )
    if write_report and outcome.num_done:
        from reports.sweep_report import best_configs_text, write_sweep_report

        write_sweep_report(out, out / "report.html")
        print(best_configs_text(out))
        print(f"report: {out / 'report.html'}")
    if outcome.num_failed:
        first = outcome.table[outcome.table.status == FAILED].iloc[0]
        print(f"{outcome.num_failed} points failed; first: point {first.point}: {first.error}")
        return 1
    return 0


def add_backend_args(p) -> None:
    p.add_argument(
        "--backend",
        choices=["local", "ray"],
        default="local",
        help="local: a process pool on this machine (default); ray: Ray tasks",
    )
    p.add_argument("--ray", dest="backend", action="store_const", const="ray", help="--backend ray")
    p.add_argument(
        "--workers",
        type=int,
        help="local processes, or CPUs of a local Ray instance (default: all cores)",
    )
    p.add_argument(
        "--ray-address",
        help="join an existing Ray cluster (auto, HOST:6379 or ray://HOST:10001; "
        "default: $RAY_ADDRESS if set, else start a local instance)",
    )
    p.add_argument("--restart", action="store_true", help="discard earlier results in --out")
    p.add_argument("--no-report", action="store_true", help="skip report.html")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def register(sub) -> None:
    p = sub.add_parser("sweep", help="run a parameter sweep (one simulation per point)")
    p.add_argument("sweep", metavar="SWEEP", help="sweep file (YAML/JSON): base, axes, sampling")
    p.add_argument("--out", required=True, help="sweep directory (re-run to resume)")
    add_backend_args(p)
    p.set_defaults(func=cmd_sweep)
