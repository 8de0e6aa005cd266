"""Where sweep points run: a local process pool, or Ray (a local instance or an existing cluster).

A backend takes tasks ({point_id, index, arm, values, config}) and yields one record per task as
it finishes. A point's result depends only on its config (the simulation seeds its generators
from `config.seed`), so both backends give the same metrics for the same points.
Stopping: `should_stop()` is polled every POLL_S; the backend then returns and `close()` ends the
points in flight (they are not recorded, so a re-run does them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing import connection, get_context
from pathlib import Path

from sim.config import ConfigError, parse_config

POLL_S = 0.2
StopFn = Callable[[], bool]


def run_point(task: dict) -> dict:
    """Simulate one point (in a worker). Never raises: a failure is a record carrying its error.
    wall_s is the simulation's own time (config parse + run), not the worker's first imports."""
    record = {k: task[k] for k in ("point_id", "index", "arm", "values")}
    started = time.perf_counter()
    try:
        from kvsched.experiment import run_arm  # inside: a node missing the code records why

        started = time.perf_counter()
        cfg = parse_config(task["config"], source="point")
        cluster, metrics, _, _ = run_arm(cfg, task["arm"], show_progress=False)
        # The latency model in force: a node without the calibration file would fall back to the
        # roofline, and the table must show it.
        record.update(status="ok", metrics=metrics, latency_model=cluster.latency.name, error=None)
    except Exception as err:  # a point's failure is data: record it and go on with the sweep
        error = f"{type(err).__name__}: {err}{_where(err)}".splitlines()[0]
        record.update(status="failed", metrics={}, latency_model=None, error=error)
    record["wall_s"] = round(time.perf_counter() - started, 3)
    return record


def _where(err: BaseException) -> str:
    """' (at file.py:LINE)' of the innermost frame outside installed packages (our code's line)."""
    frames = traceback.extract_tb(err.__traceback__) if err.__traceback__ else []
    ours = [f for f in frames if "site-packages" not in f.filename] or frames
    return f" (at {ours[-1].filename.rsplit('/', 1)[-1]}:{ours[-1].lineno})" if ours else ""


def failed_record(task: dict, error: str) -> dict:
    record = {k: task[k] for k in ("point_id", "index", "arm", "values")}
    record.update(status="failed", metrics={}, latency_model=None, error=error, wall_s=None)
    return record


# -- local process pool ------------------------------------------------------------------------
def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwind, so the interpreter's exit clean-up still runs


def _worker_main(conn) -> None:
    signal.signal(
        signal.SIGINT, signal.SIG_IGN
    )  # Ctrl-C reaches the whole group; the parent decides
    # The parent ends a point in flight with SIGTERM; exiting through SystemExit (not the default
    # kill) lets multiprocessing unlink the semaphores this process created.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the parent went away
            return
        if task is None:
            return
        conn.send(run_point(task))


class _Worker:
    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.task: dict | None = None


class LocalPool:
    """`num_workers` spawned processes, one point at a time each; a worker that dies is replaced
    and its point recorded as failed."""

    def __init__(self, num_workers: int):
        self.num_workers = max(1, num_workers)
        self.ctx = get_context("spawn")  # fresh interpreters, as Ray's workers: no inherited state
        self.workers: list[_Worker] = []

    def run(self, tasks: list[dict], should_stop: StopFn) -> Iterator[dict]:
        queue = deque(tasks)
        self._start(min(self.num_workers, len(tasks)))
        while queue or any(w.task for w in self.workers):
            if should_stop():
                return
            for w in self.workers:
                if w.task is None and queue:
                    w.task = queue.popleft()
                    w.conn.send(w.task)
            busy = [w for w in self.workers if w.task]
            ready = set(connection.wait([w.conn for w in busy], timeout=POLL_S))
            for w in busy:
                if w.conn in ready:
                    yield self._collect(w)

    def _start(self, count: int) -> None:
        # Workers inherit an ignored SIGINT while they import, so a Ctrl-C then cannot kill them
        # with a traceback; the parent's own handler is installed by the caller afterwards.
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            while len(self.workers) < count:
                self.workers.append(_Worker(self.ctx))
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)

    def _collect(self, w: _Worker) -> dict:
        task, w.task = w.task, None
        assert task is not None  # only a busy worker is collected
        try:
            return w.conn.recv()
        except (EOFError, OSError):
            w.process.join(timeout=5)
            code = w.process.exitcode
            self.workers[self.workers.index(w)] = _Worker(self.ctx)
            return failed_record(task, f"worker process died (exit code {code})")

    def close(self) -> None:
        for w in self.workers:
            if w.task is None:
                with contextlib.suppress(OSError):
                    w.conn.send(None)
            else:
                w.process.terminate()  # a point in flight: stop it now, a re-run redoes it
        for w in self.workers:
            w.process.join(timeout=10)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()
        self.workers = []


# -- Ray ---------------------------------------------------------------------------------------
class RayPool:
    """Points as Ray tasks (1 CPU each). `address`: "auto", HOST:PORT or ray://... joins a cluster
    (the code is shipped with the job); None starts a local instance with `num_cpus` CPUs."""

    def __init__(self, address: str | None, num_cpus: int | None):
        try:
            import ray
        except ImportError:
            raise ConfigError(
                "--backend ray: Ray is not installed; install the extra: kvsched[ray]"
            ) from None
        self.ray = ray
        self.owns_instance = not ray.is_initialized()
        if self.owns_instance:
            try:
                ray.init(**_ray_init_kwargs(address, num_cpus))
            except (ConnectionError, RuntimeError, ValueError) as err:
                where = f"the Ray cluster at {address}" if address else "a local Ray instance"
                raise ConfigError(
                    f"--ray-address: cannot start or join {where}: "
                    f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
                ) from None
        # SPREAD: a sweep's points go over every raylet of the cluster rather than filling the
        # driver's node first (results do not depend on where a point runs).
        self.remote = ray.remote(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")(
            run_point_on_ray
        )
        self.in_flight: dict = {}  # object ref -> task

    def run(self, tasks: list[dict], should_stop: StopFn) -> Iterator[dict]:
        queue = deque(tasks)
        window = 2 * max(1, int(self.ray.cluster_resources().get("CPU", 1)))  # keep every CPU fed
        while queue or self.in_flight:
            if should_stop():
                return
            while queue and len(self.in_flight) < window:
                task = queue.popleft()
                self.in_flight[self.remote.remote(task)] = task
            ready, _ = self.ray.wait(list(self.in_flight), num_returns=1, timeout=POLL_S)
            for ref in ready:
                task = self.in_flight.pop(ref)
                try:
                    yield self.ray.get(ref)
                except self.ray.exceptions.RayError as err:
                    yield failed_record(task, f"{type(err).__name__}: {err}".splitlines()[0])

    def close(self) -> None:
        for ref in self.in_flight:
            self.ray.cancel(ref, force=True)
        self.in_flight = {}
        if self.owns_instance:
            self.ray.shutdown()


def run_point_on_ray(task: dict) -> dict:
    """run_point, plus the id of the Ray node (raylet) that ran it: the journal shows where
    each point ran (the table does not, so it equals the local one)."""
    import ray

    return {**run_point(task), "ray_node_id": ray.get_runtime_context().get_node_id()}


def _ray_init_kwargs(address: str | None, num_cpus: int | None) -> dict:
    if address is None:
        return dict(
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    # A remote cluster's nodes may not have this checkout: ship the project (code and the
    # latency calibration files) as the job's working directory. Its dependencies must be
    # installed on the nodes (docs/sweeps.md).
    root = Path(__file__).resolve().parent.parent
    return dict(
        address=address,
        log_to_driver=False,
        logging_level=logging.WARNING,
        runtime_env={"working_dir": str(root), "excludes": SHIP_EXCLUDES},
    )


SHIP_EXCLUDES = ["runs", "**/__pycache__", "*.parquet", "*.html", "tests", "docs"]


def make_backend(name: str, workers: int, ray_address: str | None):
    if name == "local":
        return LocalPool(workers)
    if name == "ray":
        # RAY_ADDRESS (set by `ray start` users, as Ray's own tools read it) joins that cluster.
        address = ray_address or os.environ.get("RAY_ADDRESS") or None
        return RayPool(address, None if address else workers)
    raise ConfigError(f"--backend: unknown backend {name!r}; allowed: local, ray")
