"""Wall-clock serving loop: real arrivals, the scheduler's steps, the GPU executor's time.

The same loop as the simulator's node, with the clock replaced by perf_counter: requests enter
at their arrival times (open loop) or when their client's previous request finishes (closed
loop); the scheduler picks a step at `now`, the executor runs it, and the scheduler applies it
at the real end time. A step that would end after `duration_s` is not applied, as the
simulator stops at `duration_s` with that step still in flight.

The scheduler is sim.scheduler.Scheduler (the simulator's own object: `add`, `schedule(now)`,
`apply(step, now)`); the driver never touches pages or the prefix index. `idle_reclaim` is the
KV manager's: when nothing can run, how long until memory may come back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from engine.host_probe import HostProbe
from engine.runner import GpuExecutor
from sim.metrics import Recorder
from sim.scheduler import Scheduler, SchedulerQueues
from sim.steps import step_row

if TYPE_CHECKING:
    from sim.cluster import Cluster

IDLE_POLL_S = 0.0005  # an idle loop re-checks memory that may come back this often
SPIN_S = 0.0005  # sleep until this close to an arrival, then spin (sleep overshoots ~0.1 ms)


@dataclass
class RunResult:
    sequences: list = field(default_factory=list)
    steps: list[tuple] = field(default_factory=list)  # step_row + engine.runner.ENGINE_STEP_COLUMNS
    wall_s: float = 0.0
    series: Recorder | None = None  # timeseries.csv rows, sampled as the simulator samples
    host_speed: list[tuple[float, float]] = field(default_factory=list)  # engine/host_probe.py


class EngineNode(SchedulerQueues):
    """The node as `sim.metrics.Recorder` samples it (its KV usage and queues), read from the
    engine's scheduler: an engine run's timeseries.csv has the simulator's columns."""

    node_id = 0

    def __init__(self, scheduler: Scheduler, node_cfg):
        self.scheduler, self.kv, self.cfg = scheduler, scheduler.kv, node_cfg


class EngineCluster:
    """`Recorder.sample`'s view of a one-node engine."""

    def __init__(self, scheduler: Scheduler, cfg):
        self.nodes = [EngineNode(scheduler, cfg.node)]
        self.token_bytes = cfg.model.kv_bytes_per_token


class WallClockDriver:
    def __init__(
        self,
        scheduler: Scheduler,
        executor: GpuExecutor,
        make_sequence: Callable,  # (request, arrival_s) -> Sequence, status FAILED if it never fits
        duration_s: float,
        idle_reclaim: Callable[[float], float | None],
        sampler: tuple[Recorder, EngineCluster, float] | None = None,
    ):
        """`sampler`: (recorder, the node as it reads it, interval s): one time-series row per
        interval, taken between steps (host time outside every measured step)."""
        self.scheduler, self.executor = scheduler, executor
        self.sampler = sampler
        self._next_sample = 0.0
        self.idle_reclaim = idle_reclaim
        self.make_sequence = make_sequence
        self.duration_s = duration_s
        self.result = RunResult()
        self._t0 = 0.0
        self.host_probe = HostProbe()
        self._on_done: Callable | None = None  # closed loop: a finished request frees its client
        self._exhausted = False  # the workload has no more requests
        # Closed loop: a client's next request reaches the queue after the scheduler planned the
        # step that follows its previous request's end, as in the simulator (there the client's
        # send is its own event at that instant, after the node has planned its next step; in a
        # real deployment the network hop makes it miss that step too).
        self._submit_after_schedule = False

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def _submit(self, req, arrival_s: float) -> None:
        seq = self.make_sequence(req, arrival_s)
        self.result.sequences.append(seq)
        if seq.status.value == "failed":
            if self._on_done is not None:
                self._on_done(seq)
            return
        seq.node, seq.routed_s = 0, self.now()
        self.scheduler.add(seq)

    def run_open_loop(self, requests: Iterator) -> RunResult:
        pending = iter(requests)
        nxt = next(pending, None)

        def arrivals(now: float) -> float | None:
            nonlocal nxt
            while nxt is not None and nxt.arrival_s <= now and nxt.arrival_s < self.duration_s:
                self._submit(nxt, nxt.arrival_s)
                nxt = next(pending, None)
            if nxt is None or nxt.arrival_s >= self.duration_s:
                self._exhausted = True
                return None
            return nxt.arrival_s

        return self._loop(arrivals)

    def run_closed_loop(self, requests: Iterator, num_clients: int) -> RunResult:
        pending = iter(requests)
        ready: list[float] = []  # times at which a client is free to send

        def done(seq) -> None:
            ready.append(seq.finish_s if seq.finish_s == seq.finish_s else self.now())

        self._on_done = done

        def arrivals(now: float) -> float | None:
            while ready:
                req = next(pending, None)
                if req is None:
                    ready.clear()
                    self._exhausted = True
                    break
                self._submit(req, ready.pop())
            return None

        ready.extend([0.0] * num_clients)
        self._submit_after_schedule = True
        return self._loop(arrivals)

    def _sample(self, now: float) -> None:
        """Time-series rows up to now, stamped at their interval marks (the state is the one
        between the steps around each mark, as the simulator's sampler sees it)."""
        recorder, cluster, interval = self.sampler  # type: ignore[misc]
        view = cast("Cluster", cluster)  # Recorder reads only what EngineCluster has
        while self._next_sample <= now and self._next_sample < self.duration_s:
            recorder.sample(self._next_sample, view)
            self._next_sample += interval

    def _loop(self, arrivals: Callable[[float], float | None]) -> RunResult:
        """Plan, run and apply steps until the run ends. Each step's row records, besides the
        executor's timing, the host time around it on its own clock: planning it (`plan_s`),
        applying it (`apply_s`; `sched_s` is the two together) and the loop's own work that
        belongs to it (`loop_s`: the time-series samples, the host-speed probe and arrivals taken
        in before it is planned, or right after in a closed loop, and handing its finished requests back). The
        rest of the time between two steps is not split (the executor's work after its own
        clock stops, building the step's row): validate's gap between steps still holds it, and
        the arrivals of a closed-loop pass that planned nothing belong to no step."""
        self._t0 = time.perf_counter()
        if self.sampler is not None:
            self.result.series = self.sampler[0]
        self.result.host_speed = self.host_probe.rows
        while True:
            loop_t = time.perf_counter()
            now = self.now()
            if now >= self.duration_s:
                break
            if self.sampler is not None:
                self._sample(now)
            self.host_probe.maybe(now)
            late = self._submit_after_schedule
            next_arrival = None if late else arrivals(now)
            if self._exhausted and not self.scheduler.has_work():
                break  # a finite workload is done before duration_s
            t = time.perf_counter()
            loop_s = t - loop_t
            step = self.scheduler.schedule(self.now())
            plan_s = time.perf_counter() - t
            if late:
                t = time.perf_counter()
                next_arrival = arrivals(self.now())
                loop_s += time.perf_counter() - t
            if not step.items:
                if late and self.scheduler.has_work():
                    continue  # an idle node plans what its clients just sent
                self._idle(next_arrival)
                continue
            start = self.now()
            timing, _ = self.executor.run(step.items)
            end = self.now()
            if end > self.duration_s:
                break  # still in flight when the run ends
            row = step_row(0, len(self.result.steps), start, timing.duration_s, step)
            t = time.perf_counter()
            finished = self.scheduler.apply(step, end)
            apply_s = time.perf_counter() - t
            t = time.perf_counter()
            for seq in finished:
                self.executor.forget(seq)
                if self._on_done is not None:
                    self._on_done(seq)
            loop_s += time.perf_counter() - t
            timings = (timing.gpu_s, timing.prep_s, plan_s + apply_s, plan_s, apply_s, loop_s)
            self.result.steps.append((*row, *timings))
        self.result.wall_s = self.now()
        return self.result

    def _idle(self, next_arrival: float | None) -> None:
        wait = self.idle_reclaim(self.now())
        until = self.duration_s if next_arrival is None else next_arrival
        if wait is not None:
            until = min(until, self.now() + max(wait, IDLE_POLL_S))
        if next_arrival is None and wait is None and self._on_done is not None:
            until = min(until, self.now() + IDLE_POLL_S)
        gap = until - self.now()
        if gap > SPIN_S:
            time.sleep(gap - SPIN_S)
        while self.now() < until:
            pass
