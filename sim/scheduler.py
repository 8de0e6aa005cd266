"""A node's step decision, pure: no SimPy, no clock but the `now` it is handed.

Each step (as vLLM's v1 scheduler): running requests first (a decode token each, or the next
chunk of their prefill), then waiting requests in FCFS order while the token budget, the sequence
limit and KV memory allow. A running request that cannot get a page preempts a running request
(the scheduling policy picks it; vLLM's rule: the newest) until it fits: recompute, its pages are
dropped, cached ones stay cached. The waiting head that cannot be placed blocks the queue
(head-of-line), as in vLLM.

`schedule(now)` plans a step and allocates its KV; whoever executes it (the latency model in a
simulation, the GPU in the engine) says how long it took; `apply(step, now)` advances the
sequences at the step's end and returns the ones that finished.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from sim.config import NodeConfig
from sim.kv.manager import KVUsage
from sim.kv.protocol import CacheCounters, KVManager, headroom_tokens
from sim.latency.base import StepPlan, StepShape
from sim.native import mypyc_attr
from sim.policy_api import SchedulingPolicy
from sim.sequence import Sequence, Status

# (sequence, new tokens this step, is a prefill chunk)
BatchItem = tuple[Sequence, int, bool]


@mypyc_attr(allow_interpreted_subclasses=True)  # tests/app/test_host_speed.py
@dataclass(slots=True)
class Step:
    """One planned step: what runs, and what planning it did to the queues."""

    items: list[BatchItem] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)  # preempted while planning it
    admitted: list[Sequence] = field(default_factory=list)  # waiting requests it admitted
    rejected: list[Sequence] = field(default_factory=list)  # cache.on_oom reject: failed at once
    crashed: bool = False  # cache.on_oom crash: no hole at the limit, the process dies instead

    def plan(self) -> StepPlan:
        """The step's shape, as latency models price it."""
        prefill_new = [n for _, n, pre in self.items if pre]
        prefill_ctx = [s.num_computed for s, _, pre in self.items if pre]
        decode = [s.num_computed + 1 for s, _, pre in self.items if not pre]
        return StepPlan(
            prefill_new=np.array(prefill_new, dtype=np.int64),
            prefill_ctx=np.array(prefill_ctx, dtype=np.int64),
            decode_ctx=np.array(decode, dtype=np.int64),
        )

    def shape(self) -> StepShape:
        """`plan()` as plain ints (what the simulator prices every step; no arrays)."""
        new, ctx = [], []
        num_decode = decode_sum = 0
        for seq, n, pre in self.items:
            if pre:
                new.append(n)
                ctx.append(seq.num_computed)
            else:
                num_decode += 1
                decode_sum += seq.num_computed + 1
        return StepShape(new, ctx, num_decode, decode_sum)


class Scheduler:
    def __init__(self, cfg: NodeConfig, kv: KVManager, policy: SchedulingPolicy):
        self.cfg = cfg
        self.kv = kv
        self.policy = policy  # policies.scheduling, as the config's policies.scheduling names
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.num_planned = 0  # steps planned with work in them (a replay's clock: queued_step)
        self.waiting_prompt_tokens = 0  # prompt tokens of the queued requests (the router reads it)
        self.headroom_tokens = headroom_tokens(cfg.admission_watermark, kv.capacity_tokens())
        # (decoding requests) -> does each one's next token fit without eviction? (fast path)
        self._room_for_next_decode = getattr(kv, "room_for_next_decode", None)
        self._decode_span = getattr(kv, "decode_span", None)  # (requests, limit) -> pairs
        self._kv_repeat_decode = getattr(kv, "repeat_decode", None)  # (requests, now): inlined

    def add(self, seq: Sequence, planned_ahead: int = 0) -> None:
        """Queue `seq`; `planned_ahead`: steps already planned that the count does not hold yet
        (a decode span's, applied later)."""
        seq.queued_step = self.num_planned + planned_ahead  # the first step planned with it queued
        self._enqueue(seq, front=False)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    # -- planning ------------------------------------------------------------------------------
    def schedule(self, now: float) -> Step:
        """Pick (sequence, new tokens, is prefill) for one step; allocates their KV."""
        budget = self.cfg.max_num_batched_tokens
        step = Step()
        items, grow, running = step.items, self.kv.grow, Status.RUNNING
        for seq in self.running[:]:  # a copy: preemption removes from the list
            if budget == 0:
                break
            if seq.status is not running:
                continue  # preempted earlier in this loop
            remaining = seq.prompt_tokens + seq.recomputed_outputs - seq.num_computed
            n = (remaining if remaining < budget else budget) if remaining > 0 else 1
            if not grow(seq, n, now):
                self._make_room(step, seq, n, now)
            if seq.status is running:
                items.append((seq, n, remaining > 0))
                budget -= n
        if not step.preempted:
            self._admit_waiting(step, budget, now)
        if items:
            self.num_planned += 1
        return step

    def _make_room(self, step: Step, seq: Sequence, n: int, now: float) -> None:
        """`seq` found no room for its n tokens: preempt (the policy's victim) until it fits or
        it is the victim itself."""
        while True:
            victim = self.policy.victim(self.running)
            self.preempt(victim)
            step.preempted.append(victim)
            if victim is seq or self.kv.grow(seq, n, now):
                return

    def _admit_waiting(self, step: Step, budget: int, now: float) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            seq = self.waiting[0]
            if not self.kv.admit(seq, now):
                action = self.kv.oom_action(seq)
                if action == "reject":
                    step.rejected.append(self._reject(now))
                    continue
                step.crashed = action == "crash"
                break
            n = min(seq.prefill_target - seq.num_computed, budget)
            if not self.kv.grow(seq, n, now) or self.kv.free_tokens() < self.headroom_tokens:
                self.kv.free(seq)
                break
            self.kv.commit(seq, now)
            self.waiting.popleft()
            self.waiting_prompt_tokens -= seq.prompt_tokens
            seq.status = Status.RUNNING
            self.running.append(seq)
            step.items.append((seq, n, True))
            step.admitted.append(seq)
            if seq.scheduled_s != seq.scheduled_s:  # NaN: first admission
                seq.scheduled_s = now
            budget -= n

    def _reject(self, now: float) -> Sequence:
        """The waiting head found no room and cache.on_oom is reject: it fails at once."""
        seq = self.waiting.popleft()
        self.waiting_prompt_tokens -= seq.prompt_tokens
        seq.status = Status.FAILED
        seq.finish_s = now
        return seq

    def crash(self) -> list[Sequence]:
        """The serving process died: every request it held is lost (returned, reset to be sent
        again) and the KV pool comes back empty."""
        lost = [*self.running, *self.waiting]
        self.running.clear()
        self.waiting.clear()
        self.waiting_prompt_tokens = 0
        self.kv.reset()
        for seq in lost:
            seq.reset_progress()
        return lost

    def preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.free(seq)
        seq.num_computed = 0
        seq.stored_pages = 0
        seq.recomputed_outputs = seq.num_generated
        seq.preemptions += 1
        seq.status = Status.WAITING
        self.num_preemptions += 1
        self._enqueue(seq, front=True)

    def _enqueue(self, seq: Sequence, front: bool) -> None:
        (self.waiting.appendleft if front else self.waiting.append)(seq)
        self.waiting_prompt_tokens += seq.prompt_tokens

    # -- the step's end ------------------------------------------------------------------------
    def apply(self, step: Step, now: float) -> list[Sequence]:
        """The step ended at `now`: advance its sequences; returns those that finished."""
        self.kv.end_step(now)  # a new epoch: what this step's finishes release waits for the next
        finished = []
        on_computed = self.kv.on_computed
        for seq, n, was_prefill in step.items:
            computed = seq.num_computed = seq.num_computed + n
            on_computed(seq, n, now)
            if was_prefill and computed < seq.prompt_tokens + seq.recomputed_outputs:
                continue  # more prompt chunks (or recomputed outputs) to go
            generated = seq.num_generated = seq.num_generated + 1
            if generated == 1:
                seq.first_token_s = now
            if generated >= seq.req.output_tokens:
                self.finish(seq, now)
                finished.append(seq)
        return finished

    # -- the same decode batch again (the simulator's fast path) --------------------------------
    def is_batch_decode(self, step: Step) -> bool:
        """Does `step` decode every running request, in order, and nothing else (nothing
        preempted, admitted or rejected while planning it)?"""
        items = step.items
        if step.preempted or step.admitted or step.rejected or len(items) != len(self.running):
            return False
        return not any([pre for _, _, pre in items])

    def can_repeat_decode(self, seqs: list[Sequence]) -> bool:
        """For a batch decode (`is_batch_decode`) of `seqs` in flight: would `apply` then
        `schedule` plan the very same decode batch, with no request finishing, no admission
        attempt and every request's next token finding room without eviction or preemption?
        Reads only."""
        return not self.would_admit(len(seqs)) and self.decodes_fit(seqs)

    def would_admit(self, size: int) -> bool:
        """Would the next `schedule`, after a batch decode of `size` requests, try to admit the
        waiting head?"""
        return (
            bool(self.waiting)
            and size < self.cfg.max_num_batched_tokens
            and size < self.cfg.max_num_seqs
        )

    def decodes_fit(self, seqs: list[Sequence]) -> bool:
        """For a batch decode of `seqs` in flight: would `apply` then `schedule` decode each of
        them again, with no request finishing (or taking its first token) and every next token
        finding room without eviction or preemption (admission aside)? Reads only."""
        room = self._room_for_next_decode
        if room is None:
            return False  # a KV manager without the check (cross-node placement)
        for seq in seqs:
            generated = seq.num_generated
            if generated == 0 or generated + 1 >= seq.req.output_tokens:
                return False  # its first token, or it finishes at this step's end
        return room(seqs)

    def repeat_decode(self, seqs: list[Sequence], now: float) -> None:
        """`apply(step, now)` then `schedule(now)` for the batch decode of `seqs` that
        `can_repeat_decode` accepted: the same effects in the same order (the step object is
        planned again, in place)."""
        kv = self.kv
        if self._kv_repeat_decode is not None:
            self._kv_repeat_decode(seqs, now)
            self.num_planned += 1
            return
        kv.end_step(now)
        on_computed = kv.on_computed
        for seq in seqs:
            seq.num_computed += 1
            on_computed(seq, 1, now)
            seq.num_generated += 1
        grow = kv.grow
        for seq in seqs:
            if not grow(seq, 1, now):
                raise AssertionError("room_for_next_decode promised room")
        self.num_planned += 1

    def admit_after_decodes(self, seqs: list[Sequence], now: float) -> Step:
        """The rest of `schedule(now)` once `repeat_decode(seqs, now)` planned every running
        request's decode (`decodes_fit`, and `would_admit`): the step, with the waiting
        requests it admits (the same step as `apply` then `schedule`)."""
        step = Step(items=[(seq, 1, False) for seq in seqs])
        self._admit_waiting(step, self.cfg.max_num_batched_tokens - len(seqs), now)
        return step

    def decode_span(self, seqs: list[Sequence], end_s: float) -> int:
        """For a batch decode of `seqs` in flight until `end_s` (with no admission attempt to
        follow): how many repeats in a row, this one first, change only the node itself (no
        request finishing, new pages from the free list, nothing to reclaim after the first:
        pages retired before it all return at its end; pages filled may be indexed): the node
        may then apply them later, in one pass (`repeat_decodes`), as long as nothing outside
        reads or changes this node (its queues, its KV, its prefix index) meanwhile. One or
        more implies `decodes_fit(seqs)`: no request takes its first token or finishes at this
        step's end (the limit), and every next token finds a page on the free list (the first
        pair's)."""
        span = self._decode_span
        if span is None or not all([seq.num_generated for seq in seqs]):
            return 0
        limit = min([seq.req.output_tokens - seq.num_generated for seq in seqs]) - 1
        return span(seqs, limit, end_s)

    def prefill_span(self, step: Step, end_s: float) -> int:
        """`decode_span` for a step in flight until `end_s` that decodes every running request
        but some, in order, and completes the prompts of those (none has a token yet): at its
        end each takes its first token and, admission aside, the next `schedule` decodes the
        whole batch. How many (apply, plan again) pairs in a row, this step's first, change only
        the node itself, as if the step decoded one token of each and the prompts' other tokens
        were computed already (`repeat_decodes` with them). 0 for any other step (one that
        preempts, rejects or finishes a request, or leaves a chunk of a prompt to go), or when
        the next `schedule` would try to admit the waiting head."""
        items, running = step.items, self.running
        span = self._decode_span
        if span is None or step.preempted or step.rejected or len(items) != len(running):
            return 0
        if self.would_admit(len(running)):
            return 0
        ahead = []  # tokens each request computes at the step's end beyond a decode's one
        limit = 1 << 62
        for (seq, n, prefill), same in zip(items, running, strict=True):
            generated = seq.num_generated
            if seq is not same:
                return 0
            if prefill:
                if generated or seq.num_computed + n != seq.prompt_tokens:
                    return 0  # a chunk to go (or recomputed outputs)
                ahead.append(n - 1)
            elif generated:
                ahead.append(0)
            else:
                return 0
            limit = min(limit, seq.req.output_tokens - generated)
        return span(running, limit - 1, end_s, ahead)

    def span_tokens(self, seqs: list[Sequence], pairs: int, ahead: list[int] | None = None) -> int:
        """KV tokens the next `pairs` repeats of a span take from the free list (not applied
        yet): what the KV's used tokens grow by when they are (`repeat_decodes`), and its free
        tokens fall by, less `retired_tokens()`. `ahead`: a `prefill_span`'s first pair not
        applied yet: the tokens each request computes in it beyond a decode's one."""
        return self.kv.span_tokens(seqs, pairs, ahead)  # type: ignore[attr-defined]

    def retired_tokens(self) -> int:
        """KV tokens in retired pages: a span may start with some, which its first repeat
        returns to the free list (`decode_span`)."""
        return self.kv.retired_tokens()  # type: ignore[attr-defined]

    def usage_ahead(
        self, seqs: list[Sequence], pairs: int, ahead: list[int] | None = None
    ) -> KVUsage | None:
        """The KV's usage once the next `pairs` repeats of a span are applied (not applied
        yet), or None when only applying them tells (`ahead`: as `span_tokens`')."""
        return self.kv.usage_ahead(seqs, pairs, ahead)  # type: ignore[attr-defined]

    def span_store_keys(
        self, seqs: list[Sequence], pairs: int, ahead: list[int] | None = None
    ) -> set[int]:
        """Page keys the next `pairs` repeats of a span index (not applied yet; `ahead`: as
        `span_tokens`')."""
        return self.kv.span_store_keys(seqs, pairs, ahead)  # type: ignore[attr-defined]

    def repeat_decodes(
        self,
        seqs: list[Sequence],
        ends: list[float],
        prefills: list[tuple[Sequence, int]] | None = None,
    ) -> None:
        """`repeat_decode(seqs, now)` at each of these times, in order, for a run `decode_span`
        allowed: the same end state (the KV counts the requests' tokens too). `prefills`: the
        run `prefill_span` allowed, its first pair `apply` then `schedule` of the step that
        completed these prompts (request, chunk): each chunk's tokens but its last are counted
        computed first, that one as a decode's, and each request takes its first token at the
        first end (the same end state: its prompt's pages are indexed at that end)."""
        kv = self.kv
        if prefills:
            for seq, n in prefills:
                kv.add_computed(seq, n - 1)  # type: ignore[attr-defined]
        kv.advance_decodes(seqs, ends)  # type: ignore[attr-defined]
        if prefills:
            for seq, _ in prefills:
                seq.first_token_s = ends[0]
        self.num_planned += len(ends)

    def finish(self, seq: Sequence, now: float) -> None:
        self.running.remove(seq)
        self.kv.free(seq)
        seq.status = Status.FINISHED
        seq.finish_s = now


@mypyc_attr(allow_interpreted_subclasses=True)  # engine.driver.EngineNode
class SchedulerQueues:
    """A node's queue sizes, read from its scheduler, for the readers that look at nodes from
    outside (router views, the time-series sampler): `Node` in the simulator, `EngineNode` in
    the engine. A decode span never changes the queues, so reading them needs no sync."""

    scheduler: Scheduler

    @property
    def waiting_prompt_tokens(self) -> int:
        return self.scheduler.waiting_prompt_tokens

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    def kv_usage(self) -> tuple[KVUsage, CacheCounters]:
        """(kv.usage(), kv.counters()): what the time-series sampler reads."""
        kv = self.scheduler.kv
        return kv.usage(), kv.counters()
