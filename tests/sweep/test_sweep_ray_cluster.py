"""`kvsched sweep --ray` on a real Ray cluster of two raylets on this machine.

`ray start --head` and a second `ray start --address=HEAD` (each with one CPU and its own custom
resource), then the command with RAY_ADDRESS set, as a user would run it. The table must equal
the local pool's, and the journal must show points on both raylets. Each `ray start --block`
runs in its own process group with its own temp dir and port; the test stops exactly those
groups (never `ray stop`, which would stop every Ray instance on a shared machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from kvsched.sweep import run_sweep
from kvsched.sweep_spec import load_sweep

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "studies" / "sweep_ci.yaml"
RAY = Path(sys.executable).parent / "ray"
START_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    """Ray 2.5x clusters check a token kept in ~/.ray/auth_token, shared by every cluster on the
    machine; this test's cluster, on one machine, runs without (docs/sweeps.md: tokens)."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    return env


def _start(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [str(RAY), "start", "--block", *args],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # its own process group: stopped as a group, and only it
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # --block: ray start shuts its processes down
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # what still drains after 10 s: this group only
    proc.wait()


def _wait_for_nodes(address: str, count: int, procs: list, env: dict) -> None:
    """Until the cluster lists `count` alive nodes and schedules on all of them: their CPUs are
    in the cluster's resources (a node can be alive before the scheduler counts its CPU, and
    then every point runs on the head). A driver that connects and leaves."""
    code = (
        "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
        "alive = sum(n['Alive'] for n in ray.nodes()); "
        "cpus = int(ray.available_resources().get('CPU', 0)); "
        "print(min(alive, cpus))"
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), "ray start exited; see its log"
        done = subprocess.run(
            [sys.executable, "-c", code, address],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=ROOT,
        )
        if done.returncode == 0 and done.stdout.strip().splitlines()[-1:] == [str(count)]:
            return
        time.sleep(1)
    raise AssertionError(f"the Ray cluster at {address} did not reach {count} nodes")


@pytest.fixture
def ray_cluster(tmp_path):
    """Two raylets (head + one worker node), one CPU each; yields (address, environment)."""
    if not RAY.exists():
        pytest.skip("Ray is not installed (the kvsched[ray] extra)")
    port = _free_port()
    # Unix socket paths must stay short (~100 bytes): not under pytest's tmp_path.
    temp_dir = tempfile.mkdtemp(prefix="kvray")
    address = f"127.0.0.1:{port}"
    env = _env()
    common = ["--num-cpus=1", "--num-gpus=0", "--disable-usage-stats"]
    procs = [
        _start(
            ["--head", f"--port={port}", f"--temp-dir={temp_dir}", "--include-dashboard=false"]
            + common
            + ['--resources={"head_node": 1}'],
            tmp_path / "head.log",
            env,
        )
    ]
    try:
        _wait_for_nodes(address, 1, procs, env)
        procs.append(
            _start(
                [f"--address={address}", *common, '--resources={"second_node": 1}'],
                tmp_path / "worker.log",
                env,
            )
        )
        _wait_for_nodes(address, 2, procs, env)
        yield address, env
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(temp_dir, ignore_errors=True)


SWEEP_TRIES = 3  # Ray's SPREAD is best effort: a sweep may run every point on one raylet


def _sweep_on_ray(out: Path, env: dict) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kvsched.cli", "sweep", str(SWEEP), "--out", str(out), "--ray"]
        + ["--quiet", "--no-report"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def test_sweep_on_two_raylets_equals_local(ray_cluster, tmp_path):
    """Every sweep on the cluster gives the local table; the points spread over both raylets
    (SPREAD scheduling is best effort, so within a few sweeps, not necessarily the first)."""
    address, env = ray_cluster
    env = {**env, "RAY_ADDRESS": address}
    local = run_sweep(load_sweep(SWEEP), tmp_path / "local", workers=1, show_progress=False)
    local_table = pd.read_csv(tmp_path / "local" / "sweep.csv").drop(columns="wall_s")
    assert local.num_done == len(local_table) == 4
    seen: set = set()
    for attempt in range(SWEEP_TRIES):
        out = tmp_path / f"ray{attempt}"
        _sweep_on_ray(out, env)
        ray_table = pd.read_csv(out / "sweep.csv").drop(columns="wall_s")
        pd.testing.assert_frame_equal(ray_table, local_table)
        journal = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
        assert len(journal) == 4
        seen |= {r["ray_node_id"] for r in journal}
        if len(seen) == 2:
            break
    assert len(seen) == 2, seen  # both raylets ran points
