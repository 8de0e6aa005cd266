"""Signals and a second writer, against real processes: SIGINT, SIGTERM and SIGHUP end a run
with 128 + the signal, leave no `.partial`, no lock and no half-made parents, and never touch an
earlier run; a second writer on the same --out exits 2 at once."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fuzz_harness import TINY, check_case, leftovers, make_user_files, run_cli

from kvsched import arm_pool

ROOT = Path(__file__).resolve().parents[2]
LONG = copy.deepcopy(TINY) | {"duration_s": 3000, "cluster": {"num_nodes": 2}}
LONG["workload"]["params"]["num_clients"] = 32


def _default_signals() -> None:
    """In the child, before exec: the stop signals at their defaults. A test session started in
    the background (`cmd &` ignores SIGINT, nohup SIGHUP) hands its ignored signals down, and a
    Python started with SIGINT ignored never raises KeyboardInterrupt: the test would measure
    how pytest was launched, not kvsched."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _start(args: list[str], cwd: Path, new_group: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "kvsched.cli", *args]
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_default_signals,
        start_new_session=new_group,  # its own process group, to signal as a terminal does
    )


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("earlier", [False, True], ids=["new", "over-earlier-run"])
@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name
)
def test_signal_ends_a_run_cleanly(tmp_path, sig, earlier):
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(LONG))
    out = tmp_path / "new-parent" / "out"
    if earlier:
        out.parent.mkdir()
        ok = (tmp_path / "ok.yaml").write_text(yaml.safe_dump(TINY)) and "ok.yaml"
        run = ["run", "--quiet", "--no-report", "--config", ok, "--out", str(out)]
        assert check_case(run, tmp_path, allowed=(0,))[0] == 0
        before = _digest(out / "summary.json")
    user = make_user_files(tmp_path)
    args = ["run", "--quiet", "--no-report", "--arms", "engine", "--config", "long.yaml"]
    proc = _start([*args, "--out", str(out)], tmp_path)
    _wait_for(out.with_name("out.partial") / ".kvsched-run", proc)
    time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert b"Traceback" not in err and err.decode().strip() == f"interrupted by {sig.name}"
    assert not leftovers(tmp_path)
    if earlier:
        assert _digest(out / "summary.json") == before  # the earlier run untouched
    else:
        assert not (tmp_path / "new-parent").exists()  # the parent it made is gone too
    assert all((tmp_path / k).is_file() for k in user)


def test_second_writer_exits_2_and_first_finishes_its_cleanup(tmp_path):
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(LONG))
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(TINY))
    args = ["run", "--quiet", "--no-report", "--arms", "engine", "--out", "out"]
    first = _start([*args, "--config", "long.yaml"], tmp_path)
    try:
        _wait_for(tmp_path / "out.partial" / ".kvsched-run", first)
        code, _, err = run_cli([*args, "--config", "ok.yaml"], tmp_path)  # the first's
        assert code == 2 and err.count("\n") == 1  # .partial and lock are legitimately there
        assert "being written by another kvsched" in err and f"pid {first.pid}" in err
        assert (tmp_path / "out.partial").is_dir()  # the second writer touched nothing
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 128 + signal.SIGTERM
    assert not leftovers(tmp_path) and not (tmp_path / "out").exists()


def test_sighup_stops_a_sweep_resumably(tmp_path):
    base = copy.deepcopy(LONG) | {"duration_s": 600}
    spec = {"name": "hup", "base": base, "arm": "engine", "axes": {"seed": [1, 2, 3, 4]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    proc = _start(["sweep", "s.yaml", "--out", "sw", "--workers", "1", "--quiet"], tmp_path)
    _wait_for(tmp_path / "sw" / "sweep.json", proc)
    time.sleep(0.5)
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGHUP, err
    assert b"Traceback" not in err and b"interrupted by SIGHUP" in out
    assert not leftovers(tmp_path) and (tmp_path / "sw" / ".kvsched-run").is_file()


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state, parent pid, ...); None once the
    process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (its children, theirs, ...), read from /proc."""
    parents = {}
    for entry in Path("/proc").glob("[0-9]*"):
        if (fields := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _forked_arms(pid: int) -> tuple[set[int], set[int]]:
    """(fork servers, arm workers) below `pid`: the processes running multiprocessing's fork
    server code, the server a child of `pid`, the workers its children."""
    forked = set()
    for child in _descendants(pid):
        try:
            if b"multiprocessing.forkserver" in Path(f"/proc/{child}/cmdline").read_bytes():
                forked.add(child)
        except OSError:
            continue
    servers = {p for p in forked if (_stat(p) or ["", "-1"])[1] == str(pid)}
    return servers, forked - servers


def _start_arm_workers(tmp_path: Path) -> subprocess.Popen:
    """A 3-arm run of 2 workers in its own process group, once its `.partial` has its config."""
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(LONG))
    arms = ["--arms", "engine,paged+prefix,openclaw", "--workers", "2"]
    args = ["run", "--quiet", "--no-report", *arms, "--config", "long.yaml", "--out", "out"]
    proc = _start(args, tmp_path, new_group=True)
    _wait_for(tmp_path / "out.partial" / "config.json", proc)
    return proc


def _running_workers(proc: subprocess.Popen) -> tuple[set[int], set[int]]:
    """(fork server, arm workers) of `proc`, once both of its workers run."""
    deadline = time.monotonic() + 60
    while True:
        servers, workers = _forked_arms(proc.pid)
        if len(workers) >= 2:
            return servers, workers
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)


def _gone(pids: set[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(map(_alive, pids))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("when", ["starting", "running"])
@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name
)
def test_a_signal_to_the_process_group_ends_a_run_of_arm_workers(tmp_path, sig, when):
    """As a terminal's Ctrl-C or a service manager's stop does it: every process of the group
    gets the signal, while the workers start or while they run; only the parent answers."""
    proc = _start_arm_workers(tmp_path)
    servers: set[int] = set()
    workers: set[int] = set()
    if when == "running":
        servers, workers = _running_workers(proc)
        time.sleep(0.5)
    os.killpg(proc.pid, sig)
    signalled = time.monotonic()
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    # A parent that did not kill its workers waits out arm_pool.STOP_WAIT_S (10 s) for them;
    # killing and reaping them takes milliseconds.
    assert time.monotonic() - signalled < arm_pool.STOP_WAIT_S * 0.8
    assert proc.returncode == 128 + sig, err
    assert b"Traceback" not in err and err.decode().strip() == f"interrupted by {sig.name}"
    assert not leftovers(tmp_path) and not (tmp_path / "out").exists()
    assert not [pid for pid in workers if _alive(pid)]  # killed and waited for before it exited
    assert _gone(servers, 10)  # the fork server ends once the parent's pipe closes


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_of_a_killed_run_stop_at_their_next_report_without_a_word(tmp_path):
    """SIGKILL cannot be handled by the parent; its workers see the pipe closed when they next
    report their progress and end quietly (no traceback on the terminal, nothing left running)."""
    proc = _start_arm_workers(tmp_path)
    _, workers = _running_workers(proc)
    proc.kill()
    try:
        assert _gone(workers, 60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever is left of the group
            os.killpg(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=10)  # the workers held the same stderr
    assert b"Traceback" not in err, err
