"""The serving loop's host time per step, split: planning (plan_s), applying (apply_s) and the
loop's own work for the step (loop_s), each on its own clock. A scheduler, an executor and
arrivals that take known times (sleeps of different lengths) must land in their own column."""

from __future__ import annotations

import time
from types import SimpleNamespace

from engine.driver import WallClockDriver
from engine.host_probe import HostProbe
from sim.scheduler import Step

PLAN_S, APPLY_S, ARRIVAL_S = 0.002, 0.010, 0.020  # one sleep each; arrivals: per request
REQUESTS = 3
SLACK_S = 0.050  # a loaded machine oversleeps; still far below the next column's sleeps


class TimedScheduler:
    """Plans every added sequence as one decode step; applying it finishes them all."""

    def __init__(self):
        self.seqs: list = []

    def add(self, seq) -> None:
        self.seqs.append(seq)

    def has_work(self) -> bool:
        return bool(self.seqs)

    def schedule(self, now: float) -> Step:
        time.sleep(PLAN_S)
        return Step(items=[(seq, 1, False) for seq in self.seqs])

    def apply(self, step: Step, end: float) -> list:
        time.sleep(APPLY_S)
        done, self.seqs = self.seqs, []
        return done


class InstantExecutor:
    def run(self, items):
        return SimpleNamespace(duration_s=1e-4, gpu_s=0.0, prep_s=0.0), None

    def forget(self, seq) -> None:
        pass


def slow_sequence(req, arrival_s: float):
    time.sleep(ARRIVAL_S)  # taking a request in (the open loop does it before planning)
    return SimpleNamespace(num_computed=8, preemptions=0, status=SimpleNamespace(value="running"))


def timed_driver() -> WallClockDriver:
    return WallClockDriver(
        TimedScheduler(),  # type: ignore[arg-type]
        InstantExecutor(),  # type: ignore[arg-type]
        slow_sequence,
        duration_s=10.0,
        idle_reclaim=lambda now: None,
    )


def test_each_host_part_lands_in_its_own_column():
    driver = timed_driver()
    requests = [SimpleNamespace(arrival_s=0.0) for _ in range(REQUESTS)]
    result = driver.run_open_loop(iter(requests))
    assert len(result.steps) == 1
    *_, gpu_s, prep_s, sched_s, plan_s, apply_s, loop_s = result.steps[0]
    assert PLAN_S <= plan_s < PLAN_S + SLACK_S
    assert APPLY_S <= apply_s < APPLY_S + SLACK_S
    assert loop_s >= REQUESTS * ARRIVAL_S  # the three arrivals, not the planning
    assert plan_s < REQUESTS * ARRIVAL_S  # and the planning holds none of them
    assert sched_s == plan_s + apply_s


def test_host_probe_samples_at_most_once_an_interval():
    probe = HostProbe(interval_s=0.5)
    for now in (0.0, 0.1, 0.49, 0.5, 0.7, 1.2, 1.2, 5.0):
        probe.maybe(now)
    assert [t for t, _ in probe.rows] == [0.0, 0.5, 1.2, 5.0]
    assert all(probe_s > 0 for _, probe_s in probe.rows)


def test_the_loop_records_the_host_probe_and_times_it_in_loop_s():
    driver = timed_driver()
    seen: list[float] = []
    driver.host_probe.maybe = seen.append  # type: ignore[method-assign]
    requests = [SimpleNamespace(arrival_s=0.0)]
    result = driver.run_open_loop(iter(requests))
    assert len(result.steps) == 1
    assert len(seen) >= 1 and seen[0] < SLACK_S  # probed before the first step was planned
    assert result.host_speed is driver.host_probe.rows
