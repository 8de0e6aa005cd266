"""The GPU executor: runs one scheduler step on the model and says how long it took.

The scheduler hands over its step as (sequence, new tokens, is_prefill) items, read before the
scheduler applies the step. The executor turns them into token ids and block tables (a
sequence's `pages` are sim's page ids, so the KV it reads is exactly what sim's cache says is
there), runs one forward and samples greedily. It never allocates, frees or matches pages: that
is the scheduler's KV manager.

Token ids: a sequence is its prompt followed by the ids sim says it generates
(`Request.generated_ids()`: the workload's answer where it has one, else ids unique to the
request). The sampled token is computed every step (LM head, argmax, copy to the host), but the
id fed back, and so the KV written for it, is sim's: with `cache.cache_outputs` sim's prefix
index keys generated tokens' pages by those ids (a multi-turn request's next round quotes its
answer), so the pages hold exactly the tokens their keys name. Ids are taken modulo the
model's vocabulary (sim's generated ids are 31-bit).

Timing: `duration_s` is host wall time (perf_counter) from receiving the step to the sampled
tokens being on the host, which needs a device sync anyway. That is the time the scheduler
waits in a synchronous engine: the executor's CPU work, kernel launches, GPU time and the sync.
`gpu_s` is CUDA-event time from just before the first launch to just after the sampling (GPU
work plus launch gaps while the GPU waited on the CPU); `prep_s` is the host time spent before
it (token gathering, metadata, host-to-device copies; with a CUDA graph the input copies come
after, inside `DecodeGraphs.run`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from engine.batch import SeqWork, StepInputs
from engine.graphs import DecodeGraphs
from engine.model import PagedModel, greedy
from engine.piecewise import MixedGraphs

# Engine columns appended to sim.steps.STEP_COLUMNS in steps.csv.
ENGINE_STEP_COLUMNS = ["gpu_s", "prep_s", "sched_s", "plan_s", "apply_s", "loop_s"]


@dataclass(slots=True)
class StepTiming:
    duration_s: float  # measured wall time of the step (see the module docstring)
    gpu_s: float  # CUDA events around the launches (0 on CPU)
    prep_s: float  # executor CPU before the first launch


class StepForward:
    """How a step runs: a whole-step decode graph, piecewise graphs around attention, or eagerly.
    The choice depends only on the step's works, so every rank of a TP group takes the same path
    (the graphs hold collectives, so the ranks must replay them in lock-step)."""

    def __init__(
        self,
        model: PagedModel,
        graphs: DecodeGraphs | None = None,
        mixed: MixedGraphs | None = None,
    ):
        self.model, self.graphs, self.mixed = model, graphs, mixed

    def prepare(self, works: list[SeqWork]) -> StepInputs | None:
        """The step's device inputs; None for a decode-only step a decode graph runs (it copies
        its inputs into its own static buffers)."""
        graphed = (
            self.graphs is not None
            and not any(w.is_prefill for w in works)
            and self.graphs.size_for(len(works)) is not None
        )
        return None if graphed else self.model.prepare(works)

    def run(self, works: list[SeqWork], step: StepInputs | None) -> torch.Tensor:
        if step is None:
            assert self.graphs is not None
            return self.graphs.run(works)
        if self.mixed is not None and self.mixed.bucket_for(step.num_tokens) is not None:
            return self.mixed.run(step)
        return self.model.forward(step)

    def __call__(self, works: list[SeqWork]) -> torch.Tensor:
        return self.run(works, self.prepare(works))


class GpuExecutor:
    def __init__(self, forward: StepForward, tp_runner=None):
        self.model = forward.model
        self.forward = forward
        self.tp_runner = tp_runner  # engine.tp.TensorParallelRunner: rank 0 of a TP group
        self.vocab = self.model.shape.vocab_size
        self._ids: dict[int, np.ndarray] = {}  # request id -> prompt ++ generated ids
        self.num_steps = 0
        self._cuda = self.model.pool.k.device.type == "cuda"

    def tokens(self, seq, start: int, n: int) -> np.ndarray:
        """Token ids [n] at positions start.. of the sequence (prompt, then generated ids)."""
        rid = seq.req.request_id
        if rid not in self._ids:
            ids = np.concatenate([seq.req.prompt, seq.req.generated_ids()]).astype(np.int64)
            self._ids[rid] = ids % self.vocab
        return self._ids[rid][start : start + n]

    def run(self, items) -> tuple[StepTiming, list[int]]:
        """Run one step; items are (sequence, new tokens, is_prefill), before the scheduler
        applies it. Returns the timing and each item's sampled token."""
        t0 = time.perf_counter()
        works = [
            SeqWork(self.tokens(seq, seq.num_computed, n), seq.num_computed, seq.pages, pre)
            for seq, n, pre in items
        ]
        if self.tp_runner is not None:
            self.tp_runner.send(works)  # the followers prepare and run the same step
        step = self.forward.prepare(works)
        if self._cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        t1 = time.perf_counter()
        next_ids = greedy(self.forward.run(works, step))
        if self._cuda:
            end.record()
        sampled = next_ids.tolist()  # the sync
        timing = StepTiming(time.perf_counter() - t0, 0.0, t1 - t0)
        if self._cuda:
            timing.gpu_s = begin.elapsed_time(end) / 1e3
        self.num_steps += 1
        return timing, sampled

    def forget(self, seq) -> None:
        """A finished request's ids are no longer needed."""
        self._ids.pop(seq.req.request_id, None)
