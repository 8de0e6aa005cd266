"""One serving node as a SimPy actor: asks its scheduler for a step, has it executed, applies it.

The decision lives in `sim/scheduler.py` (pure, no SimPy); the price of a step comes from a
`StepExecutor` (the latency model when simulating). This actor only keeps simulated time: it
sleeps while nothing can run and wakes on new work or returning memory.

Two drivers, one result. `exact_steps` (the reference) waits for a SimPy timeout per step. The
default parks the step's end on the clock's step queue (`sim/clock.py`): the clock calls the
node back at that time, in the same order among all events as the timeout would have fired, so
every step is planned, priced, recorded (`on_step`) and applied at the same simulated time, with
the same floats, in the same global order; a node step costs a heap push and pop instead of a
SimPy event and a generator resumption. The loop is callbacks, not a generator, so both drivers
share it.

Decode spans (the default driver only). While the node decodes the same batch step after step
(no request finishes, nothing can be admitted, every next token finds a free page), a step's end
changes nothing anyone else sees until they look: the node prices the span's steps at its start
and hands their end times to the clock as one entry (`Clock.start_span`: each end keeps its
place among all events, the clock says how many have passed when asked), but leaves the
requests, the KV pool and the prefix index behind (pages filled by generated tokens are indexed later, at their
own step's end time and in their own order) and brings them up to date in one pass (`_sync`:
Scheduler.repeat_decodes) when anything outside reads or changes the node (its `kv`, `waiting`,
`running`, `submit`, `wake`, `sync_index`: the router before it reads the routing table the
caches feed), when the span runs out, or when the clock's `run` returns. What is read is then
exactly what the step-by-step driver would show at that moment.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import reduce
from itertools import accumulate
from operator import add

import simpy
from simpy.core import URGENT

from sim.clock import Span
from sim.config import NodeConfig
from sim.executor import StepExecutor
from sim.kv.manager import KVUsage
from sim.kv.protocol import CacheCounters, KVManager
from sim.scheduler import Scheduler, SchedulerQueues, Step
from sim.sequence import Sequence

# A span's steps are priced this many at a time: half of a span's planned steps never run (new
# work cuts it), and pricing them costs more than the clock's call at each chunk's last end.
SPAN_CHUNK = 64


class Node(SchedulerQueues):
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
        exact_steps: bool = True,
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
        # The reference driver: one SimPy event per step. Else the step's end is parked on the
        # clock's step queue (needs a sim.clock.Clock environment).
        self.exact_steps = exact_steps
        self.num_steps = 0
        self.num_span_steps = 0  # steps whose end was passed inside a decode span
        self.busy_s = 0.0
        self._wakeup = env.event()
        self._in_flight: tuple[Step, float, float] | None = None  # (step, start, price)
        # Fast path (not the reference): a step decoding the whole running batch that ends with
        # no finish, no admission attempt and room for every next token is applied and planned
        # again in place (Scheduler.repeat_decode), priced from the kept context sum.
        self._decode_s = getattr(executor, "decode_step_s", None)
        self._repeat_ok = not exact_steps and self._decode_s is not None
        self._batch_decode = False  # the step in flight decodes the whole running batch
        self._batch_seqs: list[Sequence] = []  # ... these requests, in batch order
        self._decode_sum = 0  # its decode contexts summed (Step.shape's decode_ctx_sum)
        # A decode span: ends of the steps not applied yet (None: no span), and how many more
        # step ends the span may run through before the node must look again.
        # (step, context sums) -> prices of the span's steps, or None (not priced by sums)
        self._span_prices_of = getattr(executor, "decode_span_prices", None)
        self._span_ok = self._repeat_ok and on_step is None and self._span_prices_of is not None
        # Priced chunk by chunk where a decode step's price is its size and sum alone (the
        # executor then prices any stretch of a span's steps the same)
        by_sum = getattr(executor, "prices_decode_by_sum", None)
        self._span_chunked = by_sum is not None and by_sum()
        self._span_todo = 0  # steps the span may run past those priced so far
        # Steps of a span are numbered from 1, the batch decode planned when it started (at
        # _span_times[0]; step 0 ended then or before). Step i >= 1 costs _span_prices[i - 1]
        # and ends at _span_times[i], where it is applied and planned again (the pair i,
        # applied late, by `_sync`). The clock holds the span as one entry
        # (sim/clock.py: Span) and calls the node back at its last end only; how many step ends
        # it passed meanwhile is read from the clock when asked (`_span_index`); cutting the
        # span short ends it with the step in flight.
        # A decode span is running (public: the router asks `sync_index` only of these nodes)
        self.in_span = False
        self._span_counted = 0  # step ends passed of which busy_s and num_steps count
        self._span_applied = 1  # pairs below this one are applied (the span's state is behind
        # while _span_applied <= _span_index)
        self._span_prices: list[float] = []
        self._span_times: list[float] = []
        self._span: Span | None = None  # the span on the clock
        self._span_first_sum = 0  # decode context sum of step 1 (less its prompts' chunks)
        self._span_step: Step | None = None  # the batch decode the span repeats
        # Step 1 completed these prompts (request, chunk): its pair applied later (`_sync`),
        # with the decodes' (None: step 1 was a batch decode, or its pair is applied); and the
        # tokens each request computes in step 1 beyond a decode's one (what readers add)
        self._span_prefills: list[tuple[Sequence, int]] | None = None
        self._span_ahead: list[int] | None = None
        self._span_keys: set[int] | None = None  # page keys the span indexes (when asked)
        if self._span_ok:
            env.syncs.append(self._sync)  # type: ignore[attr-defined]
        start = env.event()  # the first pass runs as a new process's would (urgent, at once)
        start.callbacks.append(self._serve)
        start._ok, start._value = True, None
        env.schedule(start, URGENT)

    # -- what the router and the metrics read --------------------------------------------------
    @property
    def cfg(self) -> NodeConfig:
        return self.scheduler.cfg

    @property
    def kv(self) -> KVManager:
        if self.in_span:
            self._sync()
        return self.scheduler.kv

    @property
    def waiting(self) -> deque[Sequence]:
        if self.in_span:
            self._sync()
        return self.scheduler.waiting

    @property
    def running(self) -> list[Sequence]:
        if self.in_span:
            self._sync()
        return self.scheduler.running

    @property
    def _span_index(self) -> int:
        """Step ends passed inside the span (the step in flight is one more): the end times
        the clock drew (none when no span runs)."""
        if not self.in_span:
            return 0
        return self.env.passed(self._span)  # type: ignore[attr-defined]

    def free_tokens(self) -> int:
        """kv.free_tokens() as the step-by-step driver shows it now, without bringing a span up
        to date: its steps not applied yet take only new pages from the free list (and the
        first returns the pages retired before the span)."""
        taken, returned = self._span_tokens()
        return self.scheduler.kv.free_tokens() - taken + returned

    def used_tokens(self) -> int:
        """kv.used_tokens(), likewise."""
        return self.scheduler.kv.used_tokens() + self._span_tokens()[0]

    def free_and_used_tokens(self) -> tuple[int, int]:
        """(free_tokens(), used_tokens()), the span's pages counted once (the router's views)."""
        kv, (taken, returned) = self.scheduler.kv, self._span_tokens()
        return kv.free_tokens() - taken + returned, kv.used_tokens() + taken

    def kv_usage(self) -> tuple[KVUsage, CacheCounters]:
        """(kv.usage(), kv.counters()) as the step-by-step driver shows them now; a span's
        steps not applied yet only take new pages and hold more tokens, counted without
        applying them where that is all they do (Scheduler.usage_ahead)."""
        pairs = self._span_index + 1 - self._span_applied  # steps ended, not applied
        if pairs > 0:
            usage = self.scheduler.usage_ahead(self._batch_seqs, pairs, self._span_ahead)
            if usage is not None:
                return usage, self.scheduler.kv.counters()
        return self.kv.usage(), self.scheduler.kv.counters()

    def sync_index(self, keys: set[int]) -> None:
        """Index the pages a span's ended steps filled (and tell the cache's listeners, the
        routing table) if any of them has one of these page keys: a reader of the table's
        entries for `keys` then sees what it would see step by step now."""
        if not self.in_span or self._span_applied > self._span_index:
            return  # (the router asks every node, per decision)
        stored = self._span_keys
        if stored is None:  # the keys of every page the span indexes (from its first step)
            stored = self._span_keys = self.scheduler.span_store_keys(
                self._batch_seqs,
                self._span.last,  # type: ignore[union-attr]
                self._span_ahead,
            )
        if not stored.isdisjoint(keys):
            self._sync()

    def _span_tokens(self) -> tuple[int, int]:
        """KV tokens the span's steps ended and not applied yet take from the free list, and
        return to it (the pages retired before the span, at its first end)."""
        if not self.in_span:
            return 0, 0
        pairs = self._span_index + 1 - self._span_applied  # steps ended, not applied
        if pairs <= 0:
            return 0, 0
        scheduler = self.scheduler
        taken = scheduler.span_tokens(self._batch_seqs, pairs, self._span_ahead)
        return taken, scheduler.retired_tokens()

    @property
    def num_preemptions(self) -> int:
        return self.scheduler.num_preemptions

    @property
    def headroom_tokens(self) -> int:
        return self.scheduler.headroom_tokens

    # -- what the router and placement call ----------------------------------------------------
    @property
    def down(self) -> bool:
        return self.env.now < self.up_at

    def submit(self, seq: Sequence) -> None:
        ahead = 0  # steps a span ended and did not apply yet (each plans one more)
        if self.in_span:  # new work: the span ends with the step in flight, applied at its end
            k = self._span_index
            self.env.cut_span(self._span, k + 1)  # type: ignore[attr-defined]
            self._span_todo = 0
            ahead = max(0, k + 1 - self._span_applied)
        seq.node = self.node_id
        if self.down:  # routed before the crash was known (or every node is down)
            self._lose([seq])
            return
        self.scheduler.add(seq, ahead)
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def wake(self) -> None:
        """Pages this node hosts were freed from outside its loop (sim/xnode/placement.py): if
        asleep, no step is in flight, so retired pages are reusable at once; then retry the
        waiting head."""
        self._sync()
        if not self._wakeup.triggered:
            self.kv.idle_reclaim(self.env.now)
            self._wakeup.succeed()

    # -- the serve loop ------------------------------------------------------------------------
    def _serve(self, _event: simpy.Event | None = None) -> None:
        """Run the serve loop at the clock's time until it must wait, then wait (a callback on
        the event waited for: SimPy resumes it exactly where a process would resume)."""
        planned = None  # the next step, when planned with the apply of the one that ended
        if self._in_flight is not None:  # the event was the end of the step in flight
            if self.in_span:
                if self._span_todo and self._extend_span():
                    return  # a chunk's last end: the span runs on
                # it ran out: the step that just ended is the node's own again
                self._sync()
                self.in_span = False
                self.env.end_span(self._span)  # type: ignore[attr-defined]
                self._span = None
                self._span_applied = 1
                self._span_prices, self._span_times = [], []
                self._span_prefills = self._span_ahead = None  # (step 1 ended last, if so)
            if self._batch_decode:
                if self._repeat():
                    return
                planned = self._repeat_and_admit()
            if planned is None:
                self._complete()
        wait = self._advance(planned)
        if wait is not None:
            wait.callbacks.append(self._serve)

    def step_ended(self) -> None:
        self._serve()

    def _advance(self, planned: Step | None = None) -> simpy.Event | None:
        """One pass of the serve loop: plan a step (unless `planned`) and start it, or fall idle.
        Returns the event to wait for, or None when the step is parked on the clock's step
        queue."""
        while True:
            now = self.env.now
            if planned is not None:
                step, planned = planned, None
            elif not self.scheduler.has_work():
                wait = self._idle()
                if wait is None:
                    continue  # retired pages came back: try again now
                return wait
            else:
                step = self.scheduler.schedule(now)
            for seq in step.rejected:
                self.on_finish(seq)
            if step.crashed:
                return self._crash()
            if not step.items:  # nothing fits and nothing runs: wait for memory or new work
                wait = self._idle()
                if wait is None:
                    continue
                return wait
            self._batch_decode = self._repeat_ok and self.scheduler.is_batch_decode(step)
            if self._batch_decode:  # priced from its context sum (run_step's float)
                seqs = self._batch_seqs = [seq for seq, _, _ in step.items]
                self._decode_sum = sum([seq.num_computed for seq in seqs]) + len(seqs)
                step_s = self._decode_s(self.node_id, step, self._decode_sum, now)  # type: ignore[misc]
                self._in_flight = (step, now, step_s)
                if self._span_ok and self._start_span(step, now, step_s):
                    return None  # its end is the span's first (sim/clock.py: Span)
            else:
                step_s = self.executor.run_step(self.node_id, step, now)
                self._in_flight = (step, now, step_s)
                if self._span_ok and self._start_prefill_span(step, now, step_s):
                    return None  # its end is the span's first
            if self.exact_steps:
                return self.env.timeout(step_s)
            self.env.park(now + step_s, self)  # type: ignore[attr-defined]
            return None

    def _repeat(self) -> bool:
        """The batch decode in flight ended: if the next step is the same batch decode (see
        Scheduler.can_repeat_decode), do what `_complete` and `_advance` would (same effects,
        same order, same floats) without planning from scratch, and park it (or start a decode
        span with it); else False."""
        assert self._decode_s is not None
        scheduler, seqs = self.scheduler, self._batch_seqs
        if not scheduler.can_repeat_decode(seqs):
            return False
        step, now = self._count_ended(), self.env.now
        scheduler.repeat_decode(seqs, now)
        self._decode_sum += len(seqs)
        step_s = self._decode_s(self.node_id, step, self._decode_sum, now)
        self._in_flight = (step, now, step_s)
        if self._span_ok and self._start_span(step, now, step_s):
            return True
        self.env.park(now + step_s, self)  # type: ignore[attr-defined]
        return True

    def _repeat_and_admit(self) -> Step | None:
        """The batch decode in flight ended and `_repeat` declined only because the next step
        tries to admit the waiting head (new work cut the span): apply it and plan the same
        decodes again in place (Scheduler.repeat_decode), then the admissions; returns the
        step `_complete` then `schedule` would plan. None where more than that changes (a
        request finishes, or a next token needs room): the general path."""
        scheduler, seqs = self.scheduler, self._batch_seqs
        if not scheduler.would_admit(len(seqs)) or not scheduler.decodes_fit(seqs):
            return None
        self._count_ended()
        now = self.env.now
        scheduler.repeat_decode(seqs, now)
        return scheduler.admit_after_decodes(seqs, now)

    def _start_span(self, step: Step, now: float, step_s: float) -> bool:
        """The batch decode `step` was just planned (it runs from `now` for `step_s`): start a
        decode span with it if, at its end, the same batch would repeat (`_repeat`) one or more
        times with nothing but the node changing (Scheduler.decode_span) and the executor
        prices those steps from their sums. The step is the span's step 1: its end and the
        repeats' are passed quietly, applied later (`_sync`), as the steps ending then would be.
        Read now, the checks read what they would at its end: nothing but a step's end changes
        the batch, and new work from outside cuts the span (`submit`)."""
        seqs, scheduler = self._batch_seqs, self.scheduler
        if step_s <= 0.0 or scheduler.would_admit(len(seqs)):
            return False
        # (apply, plan again) pairs from this step's end; one or more: it repeats (decodes_fit)
        repeats = scheduler.decode_span(seqs, now + step_s)
        if repeats < 1:
            return False
        if not self._run_span(step, now, step_s, repeats, self._decode_sum):
            return False
        self._span_prefills = self._span_ahead = None
        return True

    def _start_prefill_span(self, step: Step, now: float, step_s: float) -> bool:
        """The general step `step` was just planned (it runs from `now` for `step_s`): when it
        decodes every running request but the ones whose prompts it completes, and from its end
        the whole batch would decode on as after a batch decode (Scheduler.prefill_span), start
        a decode span with it as step 1; its pair is applied later too (`_sync`: its prompt
        chunks counted, then as the decodes'), as the step-by-step driver applies it at its end.
        Only where a decode step's price is its size and context sum alone (the prompts' pages
        are not decodes' yet: pricing from the block tables would read them too early)."""
        if not self._span_chunked or step_s <= 0.0:
            return False
        repeats = self.scheduler.prefill_span(step, now + step_s)
        if repeats < 1:
            return False
        items = step.items
        seqs = [seq for seq, _, _ in items]
        decode = Step(items=[(seq, 1, False) for seq in seqs])  # what `schedule` plans then
        # step 2's context sum, less one token a request (each computes n tokens in step 1)
        first = sum([seq.num_computed + n for seq, n, _ in items])
        self._batch_seqs = seqs
        if not self._run_span(decode, now, step_s, repeats, first):
            return False
        self._span_prefills = [(seq, n) for seq, n, prefill in items if prefill]
        self._span_ahead = [n - 1 if prefill else 0 for _, n, prefill in items]
        return True

    def _run_span(self, step: Step, now: float, step_s: float, repeats: int, first: int) -> bool:
        """Start a span of step 1 (priced `step_s`) and `repeats` batch decodes `step` after it,
        step 2's context sum `first` + the batch size, one more per request a step: False
        where the executor does not price them by their sums."""
        size = len(self._batch_seqs)
        steps = repeats + 1  # step 1 and one planned by each repeat
        priced = min(steps, SPAN_CHUNK) if self._span_chunked else steps
        sums = range(first + size, first + size * priced, size)  # steps 2 .. priced
        prices = self._span_prices_of(step, sums)  # type: ignore[misc]
        if prices is None or min(prices) <= 0.0:  # the clock needs the span's ends in order
            return False
        prices = self._span_prices = [step_s, *prices]
        self._span_todo = steps - priced
        self._span_keys = None
        # Each end is the previous one plus its price, as the clock would park them one by one.
        times = self._span_times = list(accumulate(prices, initial=now))
        self._span = self.env.start_span(self, times)  # type: ignore[attr-defined]
        self._span_first_sum = first
        self._span_step = step
        self.in_span = True
        self._span_counted = 0
        self._span_applied = 1  # pair 0 (step 0's end, before the span) planned step 1
        return True

    def _extend_span(self) -> bool:
        """The clock is at the last end priced so far and the span may run on: price its next
        chunk and hand the clock their ends (this end stays a quiet one: nothing is applied)."""
        span, seqs = self._span, self._batch_seqs
        assert span is not None and self._in_flight is not None
        size, done = len(seqs), span.last
        priced = min(self._span_todo, SPAN_CHUNK)
        first = self._span_first_sum + size * done  # step done + 1's context sum
        prices = self._span_prices_of(self._span_step, range(first, first + size * priced, size))  # type: ignore[misc]
        if prices is None or min(prices) <= 0.0:
            self._span_todo = 0
            return False
        self._span_prices += prices
        self._span_todo -= priced
        self._span_keys = None  # the pages it indexes: the steps priced now too
        times = self._span_times
        times += accumulate(prices[1:], initial=times[-1] + prices[0])  # the same sums
        self.env.extend_span(span)  # type: ignore[attr-defined]
        return True

    def _sync(self) -> None:
        """Bring the span up to the clock: count the step ends passed, apply the steps that
        ended and plan the one in flight (the state the step-by-step driver holds now)."""
        k = self._span_index
        if self._span_applied > k:
            return
        prices, times = self._span_prices, self._span_times
        counted = self._span_counted
        self.busy_s = reduce(add, prices[counted:k], self.busy_s)  # += each, in order
        self.num_steps += k - counted
        self.num_span_steps += k - counted
        self._span_counted = k
        seqs, prefills = self._batch_seqs, self._span_prefills
        if prefills is not None:  # step 1's pair first: the batch decodes from its end on
            self._span_prefills = self._span_ahead = None
            self._batch_decode = True
        self.scheduler.repeat_decodes(seqs, times[self._span_applied : k + 1], prefills)
        self._span_applied = k + 1
        self._decode_sum = self._span_first_sum + len(seqs) * k
        self._in_flight = (self._span_step, times[k], prices[k])  # type: ignore[assignment]

    def _complete(self) -> None:
        """The step in flight ended at the clock's time: record it and apply it."""
        for seq in self.scheduler.apply(self._count_ended(), self.env.now):
            self.on_finish(seq)

    def _count_ended(self) -> Step:
        """The step in flight ended at the clock's time: count it (busy time, steps) and record
        it (steps.csv, when asked); it is no longer in flight. Returns it."""
        assert self._in_flight is not None
        step, start, step_s = self._in_flight
        self._in_flight = None
        self.busy_s += step_s
        self.num_steps += 1
        if self.on_step is not None:
            self.on_step(self.node_id, start, step_s, step)
        return step

    def _crash(self) -> simpy.Event:
        """No hole at the physical limit and cache.on_oom is crash (the article's CUDA OOM): the
        process dies with every request it held, and is down for restart_s."""
        self.num_crashes += 1
        self.up_at = self.env.now + self.restart_s
        self._lose(self.scheduler.crash())
        return self.env.timeout(self.restart_s)

    def _lose(self, lost: list[Sequence]) -> None:
        if lost:
            assert self.on_crash is not None, "cache.on_oom crash needs an on_crash handler"
            self.on_crash(self.node_id, lost)

    def _idle(self) -> simpy.Event | None:
        """No step is in flight: retired pages come back as their last readers exit (None: at
        once, try again); otherwise sleep until new work or memory arrives (or pages return)."""
        self._wakeup = self.env.event()
        wait_s = self.kv.idle_reclaim(self.env.now)
        if wait_s == 0.0:
            return None
        return self._wakeup if wait_s is None else self._wakeup | self.env.timeout(wait_s)
