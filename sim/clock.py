"""The simulation clock: SimPy's environment plus a cheap queue for node step ends.

A node's step end is the most frequent event of a run (one per step per node) and the least
eventful: the node applies its step and plans the next. Parked here (`park`), it costs a heap
push and pop and a plain call, not a SimPy event and a generator resumption. The two queues are
merged in SimPy's own order, (time, priority, event id) with ids from SimPy's counter, and the
clock reads exactly the parked time, so a parked step ends at the same moment, relative to every
other event, as the timeout it replaces: results are identical to the step-by-step driver.

Decode spans (`start_span`): a node whose next steps change nothing outside it until someone
looks hands the clock all their end times at once. Only the span's last end is queued; the ends
before it are passed without any work (the clock reads how many when the node asks: `passed`).
Each of those quiet ends would have been an event with an id drawn when the end before it was
passed, and its place among events of the same time depends on that id. Such an exact tie is
rare, so the clock keeps just enough to decide it when it happens: a log of the events it
processed while a span runs (key, and the next id then), from which the id an end would have
drawn is known (`_Stamp`): after every id drawn before the event that follows the end before it,
before every id drawn from then on.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from heapq import heapify, heappop, heappush
from typing import Any, Protocol

import simpy
from simpy.core import NORMAL, URGENT


class StepEnd(Protocol):
    def step_ended(self) -> None:
        """The clock is at the end of the step this actor parked (not a quiet one)."""
        ...


class Span:
    """A node's decode span on the clock: `times[j]` is the end of its step j (step 0 ended when
    it started); ends 1 .. last - 1 are quiet, the node's `step_ended` is called at end `last`."""

    __slots__ = ("actor", "times", "last", "first_id", "stamps", "active", "entry", "trimmed")

    def __init__(self, actor: StepEnd, times: list[float], first_id: int):
        self.actor = actor
        self.times = times
        self.last = len(times) - 1
        self.first_id = first_id  # the id end 1 drew (when the span started)
        self.stamps: dict[int, float] = {}  # settled stamps of its ends (ties only)
        self.active = True
        self.entry: tuple = ()  # its last end's entry in the clock's queue
        # Its ends 1 .. trimmed were before the last log trim, whose stamps a comparison can
        # still read were settled then
        self.trimmed = 0


class _Stamp:
    """The id end j of a span would have drawn, as the third member of its event key; only read
    when an event of the same time and priority is compared with it."""

    __slots__ = ("clock", "span", "j")

    def __init__(self, clock: Clock, span: Span, j: int):
        self.clock, self.span, self.j = clock, span, j

    def __eq__(self, other: object) -> bool:
        return self is other  # an id is never equal to another event's

    def __hash__(self) -> int:
        return id(self)

    def __lt__(self, other: object) -> bool:
        return self.clock._id_lt(self, other)

    def __gt__(self, other: object) -> bool:
        return self.clock._id_lt(other, self)


EventId = Any  # an int (an event's id) or a _Stamp (a span end's)
Key = tuple[float, int, EventId]


class Clock(simpy.Environment):
    def __init__(self, initial_time: float = 0.0):
        super().__init__(initial_time)
        # (time, priority, id, actor, span): span is None, or the Span whose last end this is
        self._step_ends: list[tuple[float, int, EventId, StepEnd, Span | None]] = []
        self.num_events = 0  # SimPy events processed
        # Called when `run` returns: actors that keep state behind (a node's decode span)
        # bring it up to date, so whoever reads it after a run sees the exact state.
        self.syncs: list[Callable[[], None]] = []
        self._last_id = -1  # the last id drawn from SimPy's counter
        # The highest key processed at the current instant (the event being processed, unless
        # it was created at this instant after an event of a higher key was processed)
        self._current: Key = (initial_time, URGENT, -1)
        self._spans: list[Span] = []  # spans running
        # While a span runs, per event processed in order: the highest key processed at its
        # instant so far (time, priority, id) and the next id then
        self._log: list[tuple[float, int, EventId, int]] = []
        self._log_from = initial_time  # the log holds every event from then on

    def run(self, until: Any = None) -> Any:
        try:
            return super().run(until)
        finally:
            for sync in self.syncs:
                sync()
            self._trim_log()

    def schedule(self, event: simpy.Event, priority: Any = NORMAL, delay: Any = 0) -> None:
        """SimPy's, keeping the last id drawn."""
        eid = self._last_id = next(self._eid)
        heappush(self._queue, (self._now + delay, priority, eid, event))

    def park(self, at_s: float, actor: StepEnd, priority: int = NORMAL) -> None:
        """Call `actor.step_ended()` at simulated time `at_s` (>= now), ordered as an event of
        this priority scheduled now would be (NORMAL: a timeout; URGENT: a process's start)."""
        eid = self._last_id = next(self._eid)
        heappush(self._step_ends, (at_s, priority, eid, actor, None))

    # -- decode spans ----------------------------------------------------------------------------
    def start_span(self, actor: StepEnd, times: list[float]) -> Span:
        """Run steps ending at times[1], times[2], ... (times[0]: now) as one span: the clock
        calls `actor.step_ended()` at the last end only (or at the end `cut_span` makes last)."""
        eid = self._last_id = next(self._eid)  # end 1's id, as park would draw it now
        span = Span(actor, times, eid)
        self._spans.append(span)
        self._queue_last(span)
        return span

    def cut_span(self, span: Span, last: int) -> None:
        """End the span at its end `last` (earlier than planned; not passed yet)."""
        if last != span.last:
            ends = self._step_ends  # the old last end's entry goes (every queued entry is live)
            at = ends.index(span.entry)
            tail = ends.pop()
            if at < len(ends):
                ends[at] = tail
                heapify(ends)
            span.last = last
            self._queue_last(span)

    def extend_span(self, span: Span) -> None:
        """The span's actor added end times (at its last end, being processed): that end is
        one of its quiet ones now, the new last one is queued."""
        span.last = len(span.times) - 1
        self._queue_last(span)

    def end_span(self, span: Span) -> None:
        """The span is over (its last end was reached, or it was applied and dropped)."""
        if span.active:
            span.active = False
            self._spans.remove(span)

    def passed(self, span: Span) -> int:
        """How many of the span's quiet ends (1 .. last - 1) were passed before the event the
        clock is processing (or processed last): the steps that ended."""
        times, last, current = span.times, span.last, self._current
        k = bisect_left(times, current[0], 1, last)
        while k < last and times[k] == current[0] and self._key_lt(self._key(span, k), current):
            k += 1
        return k - 1

    def _queue_last(self, span: Span) -> None:
        last = span.last
        stamp = span.first_id if last == 1 else _Stamp(self, span, last)
        span.entry = (span.times[last], NORMAL, stamp, span.actor, span)
        heappush(self._step_ends, span.entry)

    # -- the loop --------------------------------------------------------------------------------
    def peek(self) -> float:
        ends = self._step_ends
        parked = ends[0][0] if ends else float("inf")
        return min(parked, super().peek())

    def step(self) -> None:
        """Run the parked step ends due before SimPy's next event, then that event."""
        ends, queue = self._step_ends, self._queue
        # Ids are unique, so the tuples compare on (time, priority, id) and never further.
        while ends and (not queue or ends[0] < queue[0]):
            at_s, priority, eid, actor, _ = heappop(ends)
            self._now = at_s
            # (as below: inlined, once per parked end)
            current = self._current
            if at_s != current[0] or current < (at_s, priority, eid):
                current = self._current = (at_s, priority, eid)
            if self._spans:
                self._log.append((*current, self._last_id + 1))
            actor.step_ended()
        if queue:
            # An event is processed: a span's end was passed before it if its key is below the
            # highest key processed at this instant so far (an event created at this instant
            # may come before one processed already: an urgent one after a normal one).
            at_s, priority, eid, _ = queue[0]
            current = self._current
            if at_s != current[0] or current < (at_s, priority, eid):
                current = self._current = (at_s, priority, eid)
            if self._spans:  # the log: only ties with a span's quiet ends read it
                self._log.append((*current, self._last_id + 1))
        self.num_events += 1
        super().step()

    def _trim_log(self) -> None:
        """Drop the log before now, first settling every stamp a later comparison can still
        read from it. Comparisons start at ends of now or later; a span's end j reads the log
        from its end j - 1, so of the ends before now only each span's first end from now on
        needs its stamp settled, and, where two spans' last ends before now tie (a chain of
        ties is walked back end by end, `_id_lt`), the ends of that chain. The spans that can
        be compared are the running ones and the ended ones whose last end is at now (the key
        being processed, entries kept)."""
        log, now = self._log, self._now
        drop = bisect_left(log, (now,))
        crossings: dict[float, list[tuple[Span, int]]] = {}
        for span in self._spans_comparable(log[drop:]):
            before = bisect_left(span.times, now, 1, span.last + 1) - 1  # its ends 1 .. before
            if before >= 1:
                self._value(_Stamp(self, span, before + 1))
                crossings.setdefault(span.times[before], []).append((span, before))
        for tied in crossings.values():
            for i, (a, m) in enumerate(tied):
                for b, n in tied[i + 1 :]:
                    self._settle_chain(a, m, b, n)
        for tied in crossings.values():
            for span, before in tied:
                span.trimmed = before
        del log[:drop]
        self._log_from = now

    def _spans_comparable(self, kept: list[tuple[float, int, EventId, int]]) -> list[Span]:
        """The running spans, the span of the key being processed and those of kept entries."""
        ids = [self._current[2], *(entry[2] for entry in kept)]
        ended = [x.span for x in ids if isinstance(x, _Stamp)]
        return list(dict.fromkeys([*self._spans, *ended]))

    def _settle_chain(self, a: Span, m: int, b: Span, n: int) -> None:
        """Settle the stamps comparing a later end of span a with one of span b can read: ends
        m and n tie, and so on back while their ends before them tie, down to what a previous
        trim settled."""
        while m > a.trimmed and n > b.trimmed:
            for span, j in ((a, m), (b, n)):
                if j >= 2:
                    self._value(_Stamp(self, span, j))
            if m < 2 or n < 2 or a.times[m - 1] != b.times[n - 1]:
                return
            m, n = m - 1, n - 1

    # -- exact ties --------------------------------------------------------------------------------
    def _key(self, span: Span, j: int) -> Key:
        return (span.times[j], NORMAL, span.first_id if j == 1 else _Stamp(self, span, j))

    def _key_lt(self, a: Key, b: Key) -> bool:
        if a[0] != b[0]:
            return a[0] < b[0]
        if a[1] != b[1]:
            return a[1] < b[1]
        return self._id_lt(a[2], b[2])

    def _id_lt(self, a: EventId, b: EventId) -> bool:
        """Was id a drawn before id b? Two ends stamped in the one gap between two events were
        drawn in the order of the ends before them."""
        while True:
            if isinstance(a, _Stamp) and isinstance(b, _Stamp) and a.span is b.span:
                return a.j < b.j
            va, vb = self._value(a), self._value(b)
            if va != vb or not (isinstance(a, _Stamp) and isinstance(b, _Stamp)):
                return va < vb
            ka, kb = self._key(a.span, a.j - 1), self._key(b.span, b.j - 1)
            if ka[0] != kb[0]:
                return ka[0] < kb[0]
            a, b = ka[2], kb[2]

    def _value(self, x: EventId) -> float:
        """An id as a number: an event's own; for end j >= 2 of a span, the next id when the
        event after its end j - 1 began, less a half (drawn after every id before it and
        before that one); while no event after end j - 1 began, the next id now, less a half."""
        if not isinstance(x, _Stamp):
            return x
        span, j = x.span, x.j
        if j == 1:
            return span.first_id
        settled = span.stamps.get(j)
        if settled is not None:
            return settled
        key = self._key(span, j - 1)
        if key[0] < self._log_from:
            raise AssertionError(f"end {j}'s stamp was needed after the log was trimmed")
        log = self._log
        at = bisect_left(log, (key[0],))
        while at < len(log) and log[at][0] == key[0] and self._key_lt(log[at][:3], key):
            at += 1
        if at == len(log):
            return self._last_id + 0.5
        value = span.stamps[j] = log[at][3] - 0.5
        return value
