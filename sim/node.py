"""One serving node as a SimPy actor: asks its scheduler for a step, has it executed, applies it.

The decision lives in `sim/scheduler.py` (pure, no SimPy); the price of a step comes from a
`StepExecutor` (the latency model when simulating). This actor only keeps simulated time: it
sleeps while nothing can run and wakes on new work or returning memory.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from sim.config import NodeConfig
from sim.executor import StepExecutor
from sim.kv.protocol import KVManager
from sim.scheduler import Scheduler, Step
from sim.sequence import Sequence


class Node:
    def __init__(
        self,
        env: simpy.Environment,
        node_id: int,
        scheduler: Scheduler,
        executor: StepExecutor,
        on_finish: Callable[[Sequence], None],
        on_step: Callable[[int, float, float, Step], None] | None = None,
        on_crash: Callable[[int, list[Sequence]], None] | None = None,
        restart_s: float = 0.0,
    ):
        self.env = env
        self.node_id = node_id
        self.scheduler = scheduler
        self.executor = executor
        self.on_finish = on_finish
        self.on_step = on_step  # (node, start, duration, step): steps.csv when asked for
        self.on_crash = on_crash  # (node, lost requests): the cluster fails or re-sends them
        self.restart_s = restart_s  # a crashed serving process is back after this long
        self.up_at = float("-inf")  # crashed: restarting until then (the router avoids it)
        self.num_crashes = 0
        self.num_steps = 0
        self.busy_s = 0.0
        self._wakeup = env.event()
        self.process = env.process(self.serve())

    # -- what the router and the metrics read --------------------------------------------------
    @property
    def cfg(self) -> NodeConfig:
        return self.scheduler.cfg

    @property
    def kv(self) -> KVManager:
        return self.scheduler.kv

    @property
    def waiting(self):
        return self.scheduler.waiting

    @property
    def running(self) -> list[Sequence]:
        return self.scheduler.running

    @property
    def num_preemptions(self) -> int:
        return self.scheduler.num_preemptions

    @property
    def waiting_prompt_tokens(self) -> int:
        return self.scheduler.waiting_prompt_tokens

    @property
    def headroom_tokens(self) -> int:
        return self.scheduler.headroom_tokens

    # -- what the router and placement call ----------------------------------------------------
    @property
    def down(self) -> bool:
        return self.env.now < self.up_at

    def submit(self, seq: Sequence) -> None:
        seq.node = self.node_id
        if self.down:  # routed before the crash was known (or every node is down)
            self._lose([seq])
            return
        self.scheduler.add(seq)
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def wake(self) -> None:
        """Pages this node hosts were freed from outside its loop (sim/xnode/placement.py): if
        asleep, no step is in flight, so retired pages are reusable at once; then retry the
        waiting head."""
        if not self._wakeup.triggered:
            self.kv.idle_reclaim(self.env.now)
            self._wakeup.succeed()

    # -- the serve loop ------------------------------------------------------------------------
    def serve(self):
        while True:
            if not self.scheduler.has_work():
                yield from self._idle()
                continue
            step = self.scheduler.schedule(self.env.now)
            for seq in step.rejected:
                self.on_finish(seq)
            if step.crashed:
                yield from self._crash()
                continue
            if not step.items:  # nothing fits and nothing runs: wait for memory or new work
                yield from self._idle()
                continue
            start = self.env.now
            step_s = self.executor.run_step(self.node_id, step, start)
            yield self.env.timeout(step_s)
            self.busy_s += step_s
            self.num_steps += 1
            if self.on_step is not None:
                self.on_step(self.node_id, start, step_s, step)
            for seq in self.scheduler.apply(step, self.env.now):
                self.on_finish(seq)

    def _crash(self):
        """No hole at the physical limit and cache.on_oom is crash (the article's CUDA OOM): the
        process dies with every request it held, and is down for restart_s."""
        self.num_crashes += 1
        self.up_at = self.env.now + self.restart_s
        self._lose(self.scheduler.crash())
        yield self.env.timeout(self.restart_s)

    def _lose(self, lost: list[Sequence]) -> None:
        if lost:
            assert self.on_crash is not None, "cache.on_oom crash needs an on_crash handler"
            self.on_crash(self.node_id, lost)

    def _idle(self):
        """No step is in flight: retired pages come back as their last readers exit (at once, or
        after a wait); otherwise sleep until new work or memory arrives."""
        self._wakeup = self.env.event()
        wait_s = self.kv.idle_reclaim(self.env.now)
        if wait_s == 0.0:
            return  # pages came back: try again now
        yield self._wakeup if wait_s is None else self._wakeup | self.env.timeout(wait_s)
