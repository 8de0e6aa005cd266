"""One serving node: a continuous-batching loop over a KV manager, priced by the latency model.

Each step (as vLLM's v1 scheduler): running requests first (a decode token each, or the next
chunk of their prefill), then waiting requests in FCFS order while the token budget, the sequence
limit and KV memory allow. A running request that cannot get a page preempts the newest running
request (recompute: its pages are dropped, cached ones stay cached) until it fits. The waiting
head that cannot be placed blocks the queue (head-of-line), as in vLLM.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import simpy

from sim.config import NodeConfig
from sim.latency import LatencyModel, StepPlan
from sim.sequence import Sequence, Status


class Node:
    def __init__(
        self,
        env: simpy.Environment,
        node_id: int,
        cfg: NodeConfig,
        kv,
        latency: LatencyModel,
        on_finish: Callable[[Sequence], None],
    ):
        self.env = env
        self.node_id = node_id
        self.cfg = cfg
        self.kv = kv
        self.latency = latency
        self.on_finish = on_finish
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.num_steps = 0
        self.busy_s = 0.0
        self.waiting_prompt_tokens = 0  # prompt tokens of the queued requests (the router reads it)
        self._wakeup = env.event()
        self.headroom_tokens = int(cfg.admission_watermark * kv.capacity_tokens())
        self.remote: Callable[[list, float], float] | None = (
            None  # sim/placement.py: remote KV fetch
        )
        self.process = env.process(self.serve())

    # -- what the router sees ----------------------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        seq.node = self.node_id
        self._enqueue(seq, front=False)
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def wake(self) -> None:
        """Pages this node hosts were freed from outside its loop (sim/placement.py): if asleep,
        no step is in flight, so retired pages are reusable at once; then retry the waiting head."""
        if not self._wakeup.triggered:
            self.kv.idle_reclaim(self.env.now)
            self._wakeup.succeed()

    # -- the serve loop ------------------------------------------------------------------------
    def serve(self):
        while True:
            if not self.running and not self.waiting:
                yield from self._idle()
                continue
            batch = self.schedule()
            if not batch:  # nothing fits and nothing runs: wait for memory or new work
                yield from self._idle()
                continue
            plan = self._plan(batch)
            step_s = self.latency.step_time_s(plan)
            if self.remote is not None:  # pages on other nodes arrive before the step reads them
                step_s += self.remote(batch, self.env.now)
            yield self.env.timeout(step_s)
            self.busy_s += step_s
            self.num_steps += 1
            self.apply(batch)

    def _idle(self):
        """No step is in flight: retired pages come back as their last readers exit (at once, or
        after a wait); otherwise sleep until new work or memory arrives."""
        self._wakeup = self.env.event()
        wait_s = self.kv.idle_reclaim(self.env.now)
        if wait_s == 0.0:
            return  # pages came back: try again now
        yield self._wakeup if wait_s is None else self._wakeup | self.env.timeout(wait_s)

    def schedule(self) -> list[tuple[Sequence, int, bool]]:
        """Pick (sequence, new tokens, is prefill) for one step; allocates their KV."""
        budget = self.cfg.max_num_batched_tokens
        batch: list[tuple[Sequence, int, bool]] = []
        preempted = False
        now = self.env.now
        for seq in list(self.running):
            if budget == 0:
                break
            if seq.status is not Status.RUNNING:
                continue  # preempted earlier in this loop
            remaining = seq.prefill_target - seq.num_computed
            n = min(remaining, budget) if remaining > 0 else 1
            while not self.kv.grow(seq, n, now):
                victim = self.running[-1]
                self.preempt(victim)
                preempted = True
                if victim is seq:
                    break
            if seq.status is Status.RUNNING:
                batch.append((seq, n, remaining > 0))
                budget -= n
        if not preempted:
            self._admit_waiting(batch, budget)
        return batch

    def _admit_waiting(self, batch: list[tuple[Sequence, int, bool]], budget: int) -> None:
        now = self.env.now
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            seq = self.waiting[0]
            if not self.kv.admit(seq, now):
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
            batch.append((seq, n, True))
            budget -= n

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

    @staticmethod
    def _plan(batch: list[tuple[Sequence, int, bool]]) -> StepPlan:
        prefill_new = [n for _, n, pre in batch if pre]
        prefill_ctx = [s.num_computed for s, _, pre in batch if pre]
        decode = [s.num_computed + 1 for s, _, pre in batch if not pre]
        return StepPlan(
            prefill_new=np.array(prefill_new, dtype=np.int64),
            prefill_ctx=np.array(prefill_ctx, dtype=np.int64),
            decode_ctx=np.array(decode, dtype=np.int64),
        )

    def apply(self, batch: list[tuple[Sequence, int, bool]]) -> None:
        now = self.env.now
        self.kv.end_step(now)  # a new epoch: what this step's finishes release waits for the next
        for seq, n, was_prefill in batch:
            seq.num_computed += n
            self.kv.on_computed(seq, n, now)
            if was_prefill and seq.num_computed < seq.prefill_target:
                continue  # more prompt chunks (or recomputed outputs) to go
            seq.num_generated += 1
            if seq.num_generated == 1:
                seq.first_token_s = now
            if seq.num_generated >= seq.req.output_tokens:
                self.finish(seq)

    def finish(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.free(seq)
        seq.status = Status.FINISHED
        seq.finish_s = self.env.now
        self.on_finish(seq)
