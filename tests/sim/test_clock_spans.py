"""A decode span held by the clock as one entry (sim/clock.py: `start_span`) is passed exactly as
its steps parked one by one would be: every event of the run sees the same number of the span's
step ends passed, and the span's last end comes at the same place among all events, even when
times tie exactly (grid times below: ends, probes and timeouts often fall on one instant)."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simpy.core import NORMAL, URGENT

from sim.clock import Clock

GRID = 0.25  # every time is a multiple of it: exact sums, many ties
NUM_ACTORS = 3


class StepByStep:
    """The reference: each end parked when the one before it is passed."""

    def __init__(self, env: Clock, name: int, log: list):
        self.env, self.name, self.log = env, name, log
        self.active = False

    def start(self, times: list[float], more: list[list[float]]) -> None:
        for chunk in more:  # every step known from the start
            times = times + chunk
        self.times, self.last, self.count, self.active = times, len(times) - 1, 0, True
        self.env.park(times[1], self)

    def step_ended(self) -> None:
        self.count += 1
        if self.count == self.last:
            self.active = False
            self.log.append((self.env.now, "last", self.name))
        else:
            self.env.park(self.times[self.count + 1], self)

    def passed(self) -> int | None:
        return self.count if self.active else None

    def cut(self) -> None:
        self.last = self.count + 1


class OneEntry:
    """The clock's span: one entry, the ends passed read when asked."""

    def __init__(self, env: Clock, name: int, log: list):
        self.env, self.name, self.log = env, name, log
        self.active = False

    def start(self, times: list[float], more: list[list[float]]) -> None:
        self.span, self.active, self.more = self.env.start_span(self, times), True, list(more)

    def step_ended(self) -> None:
        if self.more:  # a chunk's last end: the span runs on
            self.span.times += self.more.pop(0)
            self.env.extend_span(self.span)
            return
        self.env.end_span(self.span)
        self.active = False
        self.log.append((self.env.now, "last", self.name))

    def passed(self) -> int | None:
        return self.env.passed(self.span) if self.active else None

    def cut(self) -> None:
        self.env.cut_span(self.span, self.env.passed(self.span) + 1)
        self.more = []


class Probe:
    """An event that reads every actor, may start or cut one actor's span, and may park or
    schedule a follow-up probe."""

    def __init__(self, env: Clock, actors: list, log: list, plan: dict, name: str):
        self.env, self.actors, self.log, self.plan, self.name = env, actors, log, plan, name

    def step_ended(self, _event=None) -> None:
        env, plan = self.env, self.plan
        self.log.append((env.now, self.name, tuple(a.passed() for a in self.actors)))
        actor = self.actors[plan["actor"]]
        if plan["action"] == "start" and not actor.active:
            times = [env.now]
            for k in plan["steps"]:
                times.append(times[-1] + GRID * k)
            more, last = [], times[-1]
            for chunk in plan["more"]:  # chunks handed to the clock at a last end
                ends = []
                for k in chunk:
                    last += GRID * k
                    ends.append(last)
                more.append(ends)
            actor.start(times, more)
        elif plan["action"] == "cut" and actor.active:
            actor.cut()
        child = plan.get("child")
        if child is not None:
            schedule(env, Probe(env, self.actors, self.log, child, self.name + "'"), child)


def schedule(env: Clock, probe: Probe, plan: dict) -> None:
    delay = GRID * plan["delay"]
    if plan["via"] == "park":
        env.park(env.now + delay, probe, NORMAL)
    elif plan["via"] == "urgent":
        env.park(env.now + delay, probe, URGENT)
    else:  # a SimPy timeout
        env.timeout(delay).callbacks.append(probe.step_ended)


def run(kind, plans: list[dict], chunks: int) -> list:
    env, log = Clock(), []
    actors = [kind(env, i, log) for i in range(NUM_ACTORS)]
    for i, plan in enumerate(plans):
        schedule(env, Probe(env, actors, log, plan, str(i)), plan)
    end = 12.0
    for c in range(1, chunks + 1):
        env.run(until=end * c / chunks)
        log.append(("run", env.now, tuple(a.passed() for a in actors)))
    return log


probe_plan = st.deferred(
    lambda: st.fixed_dictionaries(
        {
            "delay": st.integers(0, 12),
            "via": st.sampled_from(["park", "urgent", "timeout"]),
            "actor": st.integers(0, NUM_ACTORS - 1),
            "action": st.sampled_from(["start", "start", "cut", "none"]),
            "steps": st.lists(st.integers(1, 3), min_size=2, max_size=12),  # prices > 0
            "more": st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=5), max_size=2),
        },
        optional={"child": probe_plan},
    )
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(probe_plan, min_size=1, max_size=12), st.integers(1, 4))
def test_a_span_on_the_clock_is_passed_as_its_steps_one_by_one(plans, chunks):
    assert run(OneEntry, plans, chunks) == run(StepByStep, plans, chunks)


def test_an_ended_span_tied_with_a_quiet_end_across_a_run_boundary():
    """A span ends at 2.0, tying a quiet end of a span still running; the run stops at 2.5 (the
    clock trims its log when `run` returns) and a reader at 3.0 then asks how many of the
    running span's ends passed: the ended span's end must still be ordered as the step-by-step
    driver orders it (a too-short log once placed it wrongly)."""

    def scenario(make, untils):
        env, out = Clock(), []
        log: list = []
        running = make(env, 1, log)

        class Reader:
            def step_ended(self):
                out.append((env.now, running.passed()))

        class Ending:
            def __init__(self):
                self.inner = make(env, 0, log)

            def start(self):
                self.inner.start([0.0, 1.0, 2.0], [])

        ending = Ending()
        ending.start()
        original = ending.inner.step_ended

        def at_last_end():
            original()
            if not ending.inner.active:
                env.park(3.0, Reader(), NORMAL)

        ending.inner.step_ended = at_last_end

        class Starter:
            def step_ended(self):
                running.start([1.5, 2.0, 3.0, 4.0], [])

        env.park(1.5, Starter(), NORMAL)
        for until in untils:
            env.run(until=until)
        return out

    reference = scenario(StepByStep, [5.0])
    assert reference == [(3.0, 1)]
    assert scenario(OneEntry, [5.0]) == reference
    assert scenario(OneEntry, [2.5, 5.0]) == reference


def test_a_quiet_end_at_a_run_boundary_reads_the_gap_before_it():
    """A span's end 4 (at 2.0) would have drawn its id at the first event after end 3 (1.25): a
    probe at 1.5, which parks a reader at 2.0, so end 4 comes before that reader. The run stops
    at 2.0, before both: the log trimmed there no longer holds the probe, so end 4's stamp must
    be settled before it goes (read from a later event's id, the reader saw end 4 not passed)."""

    def scenario(make, untils):
        env, out, log = Clock(), [], []
        span = make(env, 0, log)

        class Reader:
            def step_ended(self):
                out.append((env.now, span.passed()))

        class Probe:
            def step_ended(self):
                env.park(2.0, Reader(), NORMAL)

        span.start([0.0, 0.25, 0.5, 1.25, 2.0, 2.25], [])
        env.park(1.5, Probe(), NORMAL)
        for until in untils:
            env.run(until=until)
        return out

    reference = scenario(StepByStep, [3.0])
    assert reference == [(2.0, 4)]
    assert scenario(OneEntry, [3.0]) == reference
    assert scenario(OneEntry, [2.0, 3.0]) == reference
    assert scenario(OneEntry, [1.75, 2.0, 2.125, 3.0]) == reference


def test_two_spans_on_one_grid_keep_their_order_across_run_boundaries():
    """Two spans started at one instant on the same grid tie at every end: each comparison of
    their last ends walks both back to their first ends (`Clock._id_lt`), so every stamp on
    the way must be settled before the log goes (the clock raises if one is read from a log
    trimmed past it); the first started ends first."""
    plans = [
        {
            "delay": 0,
            "via": "park",
            "actor": 1,
            "action": "start",
            "steps": [1, 1, 1, 1, 1, 2, 3, 3, 3],
            "more": [],
            "child": {
                "delay": 0,
                "via": "park",
                "actor": 0,
                "action": "start",
                "steps": [1, 1, 1, 1, 1, 2, 3, 3, 3],
                "more": [],
            },
        }
    ]
    for chunks in (1, 2, 3, 5, 7, 12):
        reference = run(StepByStep, plans, chunks)
        assert [e for e in reference if e[1] == "last"] == [(4.0, "last", 1), (4.0, "last", 0)]
        assert run(OneEntry, plans, chunks) == reference


def test_the_log_stays_bounded_over_a_long_span_run_in_segments():
    """A span of 4,000 steps runs through 400 `run(until=)` segments while a timer ticks twice
    a step: the log keeps only the events since the last segment ended (it once kept every
    event since the span's first end, and was rescanned at every segment), and a reader every
    5 steps sees the span's ends passed as the step-by-step driver does."""

    def scenario(make, segments):
        env, out, log = Clock(), [], []
        span = make(env, 0, log)
        span.start([GRID * k for k in range(4_001)], [])

        def tick():
            for count in itertools.count(1):
                yield env.timeout(GRID / 2)
                if count % 10 == 0:
                    out.append((env.now, span.passed()))

        env.process(tick())
        longest = 0
        for k in range(1, segments + 1):
            env.run(until=1_000.0 * k / segments)
            longest = max(longest, len(env._log))
        return out, longest

    reference, _ = scenario(StepByStep, 1)
    got, longest = scenario(OneEntry, 400)
    assert got == reference and len(reference) == 799
    # 2.5 simulated s a segment: 20 ticks and the run's stop event, and that segment's tail
    assert longest <= 2 * (20 + 2)
