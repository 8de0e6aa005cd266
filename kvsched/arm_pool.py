"""Run an experiment's arms at once, one process per arm, each writing its own arm folder.

An arm's results depend only on its config (its generators are seeded from `config.seed`), so
the files are byte-identical to a run in one process; the parent keeps the config's order in
summary.json and draws every arm's progress bar from the simulated time its worker reports.
Stopping: a signal or a failing arm ends the workers still running (SIGTERM) before the caller
removes the `.partial` directory. Workers ignore SIGINT and SIGHUP, which reach the whole
process group: the parent decides.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import traceback
from collections import deque
from multiprocessing import connection, get_context
from pathlib import Path

from tqdm import tqdm

from sim.config import ExperimentConfig

MAX_WORKERS = 1024  # local processes (or a sweep's Ray CPUs) one command may ask for
POLL_S = 0.2
BAR_FORMAT = "{desc} {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} sim-s [{elapsed}<{remaining}]"


def available_cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_workers(num_arms: int) -> int:
    return max(1, min(num_arms, available_cpus()))


class RemoteTraceback(Exception):
    """The worker's traceback, attached as the cause of the exception re-raised in the parent."""

    def __str__(self) -> str:
        return self.args[0]


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwind, so multiprocessing's exit clean-up still runs


def _worker(conn, cfg: ExperimentConfig, arm: str, run_dir: Path) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    from kvsched.experiment import write_arm

    try:
        outcome = write_arm(cfg, arm, run_dir, False, lambda t: conn.send(("progress", t)))
    except Exception as err:  # sent to the parent, which raises it there
        conn.send(("failed", _picklable(err), traceback.format_exc()))
    else:
        conn.send(("done", outcome))
    conn.close()


def _picklable(err: Exception) -> Exception:
    import pickle

    try:
        pickle.loads(pickle.dumps(err))
    except Exception:  # an exception carrying an unpicklable field: its type and text
        return RuntimeError(f"{type(err).__name__}: {err}")
    return err


def _context():
    """Workers forked from a server that imported the simulator once (each arm then starts in
    milliseconds, not the second a fresh interpreter's imports take), never from this process:
    no inherited locks, threads or state. Spawned where fork servers are not available."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return get_context("spawn")
    ctx = get_context("forkserver")
    ctx.set_forkserver_preload(["kvsched.experiment"])
    return ctx


class _Arm:
    def __init__(self, ctx, cfg: ExperimentConfig, arm: str, run_dir: Path):
        self.name = arm
        self.conn, child = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_worker, args=(child, cfg, arm, run_dir), daemon=True)
        self.process.start()
        child.close()


def run_arms_in_processes(
    configs: dict[str, ExperimentConfig], run_dir: Path, workers: int, show_progress: bool
) -> dict[str, tuple[dict, str]]:
    """Each arm's (metrics, latency model name), its folder written in `run_dir`."""
    ctx = _context()
    bars = {
        arm: tqdm(
            total=cfg.duration_s,
            desc=f"{arm:>14}",
            unit="sim-s",
            position=i,
            disable=not show_progress,
            bar_format=BAR_FORMAT,
        )
        for i, (arm, cfg) in enumerate(configs.items())
    }
    queue = deque(configs)
    running: list[_Arm] = []
    outcomes: dict[str, tuple[dict, str]] = {}
    try:
        while queue or running:
            while queue and len(running) < workers:
                arm = queue.popleft()
                running.append(_Arm(ctx, configs[arm], arm, run_dir))
            for conn in connection.wait([a.conn for a in running], timeout=POLL_S):
                worker = next(a for a in running if a.conn is conn)
                if _receive(worker, bars[worker.name], outcomes):
                    running.remove(worker)
    finally:
        _stop(running)
        for bar in bars.values():
            bar.close()
    return outcomes


def _receive(worker: _Arm, bar: tqdm, outcomes: dict) -> bool:
    """Handle one message from `worker`; True once its arm is done."""
    try:
        message = worker.conn.recv()
    except EOFError:  # died without a word: killed, or out of memory
        worker.process.join(timeout=5)
        raise ChildProcessError(f"arm {worker.name!r}: {_death(worker.process.exitcode)}") from None
    if message[0] == "progress":
        bar.update(message[1] - bar.n)
        return False
    if message[0] == "failed":
        _, err, remote = message
        raise err from RemoteTraceback(remote)
    bar.update(bar.total - bar.n)
    outcomes[worker.name] = message[1]
    worker.process.join()
    worker.conn.close()
    return True


def _death(exitcode: int | None) -> str:
    """How a worker that sent nothing ended, in words (a one-line error: ChildProcessError is an
    OSError, which the CLI's boundary prints as one line and exit 2)."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        why = ", the kernel's out-of-memory killer most likely" if name == "SIGKILL" else ""
        return f"its worker process was killed by {name}{why}; rerun with --workers 1"
    return f"its worker process exited with status {exitcode} before finishing the arm"


def _stop(running: list[_Arm]) -> None:
    for worker in running:
        worker.process.terminate()
    for worker in running:
        worker.process.join(timeout=10)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        worker.conn.close()
