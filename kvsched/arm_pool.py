"""Run an experiment's arms at once, one process per arm, each writing its own arm folder.

An arm's results depend only on its config (its generators are seeded from `config.seed`), so
the files are byte-identical to a run in one process; the parent keeps the config's order in
summary.json and draws every arm's progress bar from the simulated time its worker reports.

Stopping: the parent alone decides. Its children (the fork server and the workers) are started
deaf to SIGINT, SIGTERM and SIGHUP, which a terminal or a service manager sends to the whole
process group; a signal or a failing arm makes the parent SIGKILL the workers still running and
wait for them before the caller removes the `.partial` directory (a worker writes only inside
it). A worker whose parent is gone (killed) stops at its next progress report.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import connection, forkserver, get_context, resource_tracker
from pathlib import Path

from tqdm import tqdm

from sim.config import ConfigError, ExperimentConfig

MAX_WORKERS = 1024  # local processes (or a sweep's Ray CPUs) one command may ask for
POLL_S = 0.2
STOP_WAIT_S = 10.0  # how long the parent waits for its killed workers, all together
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
BAR_FORMAT = "{desc} {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} sim-s [{elapsed}<{remaining}]"


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity, as taskset or cpusets set it; a CPU quota
    such as `docker --cpus` is not seen)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_workers(workers: int | None) -> None:
    """A command's --workers (None: its default): from 1 to MAX_WORKERS, else the one-line error."""
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(f"--workers: must be from 1 to {MAX_WORKERS} (the bound)")


def default_workers(num_arms: int) -> int:
    return max(1, min(num_arms, available_cpus()))


class RemoteTraceback(Exception):
    """The worker's traceback, attached as the cause of the exception re-raised in the parent."""

    def __str__(self) -> str:
        return self.args[0]


def _worker(conn, cfg: ExperimentConfig, arm: str, run_dir: Path) -> None:
    for sig in STOP_SIGNALS:  # started with them blocked; ignored for good: the parent kills it
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    # No bar is drawn here: tqdm's lock a thread lock, not the multiprocessing semaphore it
    # makes by default, which a killed worker would leave registered with the resource tracker.
    tqdm.set_lock(threading.RLock())
    from kvsched.experiment import write_arm

    try:
        outcome = write_arm(cfg, arm, run_dir, False, lambda t: conn.send(("progress", t)))
        message: tuple = ("done", outcome)
    except BrokenPipeError:  # the parent is gone (killed): nobody to tell, nothing to keep
        return
    except Exception as err:  # sent to the parent, which raises it there
        message = ("failed", _picklable(err), traceback.format_exc())
    try:
        conn.send(message)
    except BrokenPipeError:
        return
    conn.close()


def _picklable(err: Exception) -> Exception:
    import pickle

    try:
        pickle.loads(pickle.dumps(err))
    except Exception:  # an exception carrying an unpicklable field: its kind and text
        if isinstance(err, ConfigError):  # still a bad input: one line, exit 2
            return ConfigError(str(err))
        if isinstance(err, OSError):
            return OSError(err.errno, err.strerror or str(err), err.filename)
        return RuntimeError(f"{type(err).__name__}: {err}")
    return err


def _context():
    """Workers forked from a server that imported the simulator once (each arm then starts in
    milliseconds, not the second a fresh interpreter's imports take), never from this process:
    no inherited locks, threads or state. The helper processes multiprocessing keeps (its
    resource tracker, the fork server) are started here with the stop signals blocked, so they
    never see them; a fork server some other code of this process started earlier is reused as
    it is (its workers then may see a signal until `_worker` ignores it)."""
    with _stop_signals_deferred():
        resource_tracker.ensure_running()
        # ensure_running unblocks SIGINT and SIGTERM on its way out (it blocks them only while
        # it starts the tracker, which then ignores them): blocked again for the fork server.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        ctx = get_context("forkserver")
        ctx.set_forkserver_preload(["kvsched.experiment"])
        forkserver.ensure_running()
    return ctx


@contextmanager
def _stop_signals_deferred() -> Iterator[None]:
    """Hold this process's stop signals until the block is done, then act on the first as it
    would have been acted on; children started inside inherit them blocked (a fork server, and
    the workers it forks, never see them: `_worker` then ignores them for good).

    Blocking alone would not defer them: a process-directed signal goes to any thread not
    blocking it (numpy's BLAS threads, say), and Python runs its handler in the main thread all
    the same; so in the main thread the handlers are also swapped for one that only records the
    signal (elsewhere handlers cannot be set: the thread's mask alone is held and restored)."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    caught: list[signal.Signals] = []
    handlers: dict = {}
    try:
        if threading.current_thread() is threading.main_thread():
            recorders = {sig: lambda n, _: caught.append(signal.Signals(n)) for sig in STOP_SIGNALS}
            handlers, raised = _swap_handlers(recorders)
            if raised is not None:  # a signal's own handler ran meanwhile: it stops us now
                raise raised
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one pending is recorded now
        _, raised = _swap_handlers(handlers)
        if raised is not None:
            raise raised
        if caught:
            _act_on(caught[0], handlers[caught[0]])


def _swap_handlers(new: dict) -> tuple[dict, KeyboardInterrupt | None]:
    """Set these handlers: the ones they replace, and the stop a signal's handler raised while
    they were being set (a signal another thread took between two of them), if one did; each is
    set all the same. A signal whose handler Python did not install (None) is left alone."""
    old = {sig: signal.getsignal(sig) for sig in new}
    raised: KeyboardInterrupt | None = None
    for sig, handler in new.items():
        if old[sig] is None:
            continue
        while signal.getsignal(sig) is not handler:
            try:
                signal.signal(sig, handler)
            except KeyboardInterrupt as err:  # noqa: PERF203  (Ctrl-C, or the CLI's Terminated)
                raised = raised or err
    return {sig: handler for sig, handler in old.items() if handler is not None}, raised


def _act_on(signum: int, handler) -> None:
    if callable(handler):
        handler(signum, None)  # KeyboardInterrupt, or the CLI's Terminated
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)


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
                with _stop_signals_deferred():  # a signal now: once the worker is in `running`
                    running.append(_Arm(ctx, configs[arm], arm, run_dir))
            for conn in connection.wait([a.conn for a in running], timeout=POLL_S):
                worker = next(a for a in running if a.conn is conn)
                if _receive(worker, bars[worker.name], outcomes):
                    running.remove(worker)
    finally:
        try:
            _stop(running)
        finally:
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
        bar.update(message[1] - (bar.n or 0))
        return False
    if message[0] == "failed":
        _, err, remote = message
        raise err from RemoteTraceback(remote)
    bar.update((bar.total or 0) - (bar.n or 0))
    outcomes[worker.name] = message[1]
    worker.process.join()
    worker.conn.close()
    return True


def _death(exitcode: int | None) -> str:
    """How a worker that sent nothing ended, in words (a one-line error: ChildProcessError is an
    OSError, which the CLI's boundary prints as one line and exit 2)."""
    if exitcode is None:
        return "its worker process closed its pipe without a result and did not exit"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:  # a real-time signal
            name = f"signal {-exitcode}"
        why = ", the kernel's out-of-memory killer most likely" if name == "SIGKILL" else ""
        return f"its worker process was killed by {name}{why}; rerun with --workers 1"
    return f"its worker process exited with status {exitcode} before finishing the arm"


def _stop(running: list[_Arm]) -> None:
    """SIGKILL the workers still running and wait for each (a worker writes only inside the
    run's `.partial`, which the caller removes next); a second signal meanwhile waits for it."""
    with _stop_signals_deferred():
        for worker in running:
            worker.process.kill()
        deadline = time.monotonic() + STOP_WAIT_S
        for worker in running:
            worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
            worker.conn.close()
