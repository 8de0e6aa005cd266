"""`kvsched run --workers`: arms simulated in their own processes write the same files as one
process, keep the config's order, and fail as one line (a bad input, a worker that died)."""

from __future__ import annotations

import json
import os
import signal
import threading
from multiprocessing import get_context
from pathlib import Path

import pytest
from tqdm import tqdm

from kvsched import arm_pool
from kvsched.cli import main
from kvsched.experiment import resolve_arms, run_experiment
from tests.reports.conftest import tiny_config

ARMS = ["openclaw", "paged", "paged+prefix", "engine", "engine+cascade"]


def files_of(run_dir: Path) -> dict[str, bytes]:
    """Every file a run wrote but run_info.json (wall times) and the report."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name not in ("run_info.json", "report.html")
    }


def test_arms_in_processes_write_the_same_files_as_one_process(tmp_path):
    cfg = tiny_config(record_steps=True, arms={arm: {} for arm in ARMS})
    for name, workers in (("one", 1), ("three", 3)):
        run_experiment(
            cfg, tmp_path / name, show_progress=False, write_report=False, workers=workers
        )
    one, three = files_of(tmp_path / "one"), files_of(tmp_path / "three")
    assert list(one) == list(three) and "engine/steps.csv" in one
    assert [name for name in one if one[name] != three[name]] == []
    assert list(json.loads(one["summary.json"])["arms"]) == ARMS  # the config's order


def test_a_bad_trace_row_read_in_a_worker_is_the_same_one_line_error(tmp_path, capsys):
    trace = tmp_path / "bad.jsonl"
    row = {"input_length": 64, "output_length": 2, "hash_ids": [0]}
    lines = [json.dumps({"timestamp": 10 * i, **row}) for i in range(3)]
    lines.append(json.dumps({"timestamp": 40, **row, "input_length": -5}))
    trace.write_text("\n".join(lines) + "\n")
    workload = {"name": "trace", "params": {"path": str(trace), "format": "mooncake"}}
    config = tmp_path / "exp.json"
    config.write_text(json.dumps(tiny_config(workload=workload)))
    errors = []
    for workers in ("1", "2"):
        out = tmp_path / f"out{workers}"
        argv = ["run", "--config", str(config), "--out", str(out), "--quiet", "--no-report"]
        assert main([*argv, "--workers", workers]) == 2
        errors.append(capsys.readouterr().err)
        assert not out.exists() and not out.with_name(out.name + ".partial").exists()
    assert (
        errors[0] == errors[1]
        and errors[0].count("\n") == 1
        and "bad.jsonl:4: input_length" in errors[0]
    )


@pytest.mark.parametrize("workers", ["0", "-1", "1025"])
def test_workers_out_of_range_exit_2_naming_the_option(tmp_path, capsys, workers):
    assert main(["run", "--out", str(tmp_path / "out"), "--workers", workers]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--workers: must be from 1 to 1024" in err
    assert not (tmp_path / "out").exists()


def _killed(conn) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _exits(conn) -> None:
    os._exit(3)


@pytest.mark.parametrize(
    ("target", "words"),
    [
        (_killed, "its worker process was killed by SIGKILL, the kernel's out-of-memory killer"),
        (_exits, "its worker process exited with status 3 before finishing the arm"),
    ],
)
def test_a_worker_that_dies_without_a_word_is_a_one_line_os_error(target, words):
    ctx = get_context("fork")
    worker = arm_pool._Arm.__new__(arm_pool._Arm)
    worker.name = "engine"
    worker.conn, child = ctx.Pipe(duplex=False)
    worker.process = ctx.Process(target=target, args=(child,))
    worker.process.start()
    child.close()
    with pytest.raises(ChildProcessError, match=f"arm 'engine': {words}"):
        arm_pool._receive(worker, tqdm(disable=True), {})
    worker.conn.close()


def test_default_workers_is_one_per_cpu_and_at_most_one_per_arm(monkeypatch):
    monkeypatch.setattr(arm_pool, "available_cpus", lambda: 2)
    assert [arm_pool.default_workers(n) for n in (1, 2, 5)] == [1, 2, 2]
    monkeypatch.setattr(arm_pool, "available_cpus", lambda: 16)
    assert arm_pool.default_workers(5) == 5


def test_stop_kills_and_waits_for_every_running_worker(tmp_path):
    raw = tiny_config(duration_s=100_000, arms={"engine": {}})
    raw["workload"] = {"name": "seed", "params": {"num_clients": 8}}  # closed loop: never idle
    cfg = resolve_arms(raw, ["engine"])["engine"]
    ctx = arm_pool._context()
    running = [arm_pool._Arm(ctx, cfg, "engine", tmp_path) for _ in range(2)]
    assert running[0].conn.recv()[0] == "progress"  # simulating
    arm_pool._stop(running)
    assert [w.process.exitcode for w in running] == [-signal.SIGKILL] * 2
    assert list(tmp_path.iterdir()) == []  # nothing written


class Stopped(KeyboardInterrupt):
    pass


def _raise_stopped(signum, frame):
    raise Stopped(signum)


def test_a_stop_signal_inside_the_deferral_is_acted_on_after_it_once():
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        reached_the_end = False
        with pytest.raises(Stopped), arm_pool._stop_signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # bytecodes: where a pending handler would run
                pass
            reached_the_end = True
        assert reached_the_end
        assert signal.getsignal(signal.SIGTERM) is _raise_stopped  # restored
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_starting_the_helpers_from_another_thread_leaves_its_mask_as_it_was():
    masks: list[set] = []

    def start() -> None:
        masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        arm_pool._context()
        masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    assert masks[0] == masks[1] and signal.SIGTERM not in masks[1]
