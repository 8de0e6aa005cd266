"""The simulation clock: SimPy's environment plus a cheap queue for node step ends.

A node's step end is the most frequent event of a run (one per step per node) and the least
eventful: the node applies its step and plans the next. Parked here (`park`), it costs a heap
push and pop and a plain call, not a SimPy event and a generator resumption. The two queues are
merged in SimPy's own order, (time, priority, event id) with ids from SimPy's counter, and the
clock reads exactly the parked time, so a parked step ends at the same moment, relative to every
other event, as the timeout it replaces: results are identical to the step-by-step driver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from heapq import heappop, heappush, heapreplace
from typing import Any, Protocol

import simpy
from simpy.core import NORMAL


class StepEnd(Protocol):
    def step_ended(self) -> None:
        """The clock is at the end of the step this actor parked (not a quiet one)."""
        ...


class Clock(simpy.Environment):
    def __init__(self, initial_time: float = 0.0):
        super().__init__(initial_time)
        # (time, priority, id, actor, quiet ends: None or an iterator of next end times)
        self._step_ends: list[tuple[float, int, int, StepEnd, Iterator[float] | None]] = []
        self.num_events = 0  # SimPy events processed
        # Called when `run` returns: actors that keep state behind (a node's decode span)
        # bring it up to date, so whoever reads it after a run sees the exact state.
        self.syncs: list[Callable[[], None]] = []

    def run(self, until: Any = None) -> Any:
        try:
            return super().run(until)
        finally:
            for sync in self.syncs:
                sync()

    def park(
        self,
        at_s: float,
        actor: StepEnd,
        priority: int = NORMAL,
        quiet: Iterator[float] | None = None,
    ) -> None:
        """Call `actor.step_ended()` at simulated time `at_s` (>= now), ordered as an event of
        this priority scheduled now would be (NORMAL: a timeout; URGENT: a process's start).
        `quiet` (a node's decode span): while it yields, the end changes nothing outside the
        actor and only counts: the clock parks the next end at the time it yields, as `park`
        would have then (step_ended is called at the first end it yields none for)."""
        heappush(self._step_ends, (at_s, priority, next(self._eid), actor, quiet))

    def peek(self) -> float:
        parked = self._step_ends[0][0] if self._step_ends else float("inf")
        return min(parked, super().peek())

    def step(self) -> None:
        """Run the parked step ends due before SimPy's next event, then that event."""
        ends, queue, eid = self._step_ends, self._queue, self._eid
        # Ids are unique, so the tuples compare on (time, priority, id) and never further.
        while ends and (not queue or ends[0] < queue[0]):  # type: ignore[operator]
            at_s, _, _, actor, quiet = ends[0]
            self._now = at_s
            next_s = None if quiet is None else next(quiet, None)
            if next_s is None:
                heappop(ends)
                actor.step_ended()
            else:  # pop this end and park the next one (as `park` would), in one heap pass
                heapreplace(ends, (next_s, NORMAL, next(eid), actor, quiet))
        self.num_events += 1
        super().step()
