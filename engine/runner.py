"""The GPU executor: runs one scheduler step on the model and says how long it took.

The scheduler hands over its step as (sequence, new tokens, is_prefill) items, read before the
scheduler applies the step. The executor turns them into token ids and block tables (a
sequence's `pages` are sim's page ids, so the KV it reads is exactly what sim's cache says is
there), runs one forward, samples greedily, and keeps every sequence's generated tokens (a
decode's input, and what a recompute after preemption prefills again). It never allocates,
frees or matches pages: that is the scheduler's KV manager.

Timing: `duration_s` is host wall time (perf_counter) from receiving the step to the sampled
tokens being on the host, which needs a device sync anyway. That is the time the scheduler
waits in a synchronous engine: the executor's CPU work, kernel launches, GPU time and the sync.
With CUDA graphs a decode-only step's input copies happen inside `graphs.run`, so its
`prep_s` covers only token gathering. `gpu_s` is CUDA-event time from just before the first launch to just after the sampling (GPU
work plus launch gaps while the GPU waited on the CPU); `prep_s` is the host time spent before
the first launch (token gathering, metadata, host-to-device copies).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from engine.batch import SeqWork
from engine.graphs import DecodeGraphs
from engine.model import PagedModel, greedy

STEP_COLUMNS = [
    "step",
    "start_s",
    "duration_s",
    "gpu_s",
    "prep_s",
    "num_prefill_chunks",
    "prefill_tokens",
    "prefill_ctx_sum",
    "num_decodes",
    "decode_ctx_sum",
    "cached_tokens",
    "sched_s",
]


@dataclass(slots=True)
class StepRecord:
    step: int
    start_s: float  # run clock when the executor received the step
    duration_s: float  # measured wall time of the step (see the module docstring)
    gpu_s: float  # CUDA events around the launches (0 on CPU)
    prep_s: float  # executor CPU before the first launch
    num_prefill_chunks: int
    prefill_tokens: int
    prefill_ctx_sum: int  # tokens already in KV before each chunk, summed
    num_decodes: int
    decode_ctx_sum: (
        int  # tokens in KV per decode (including its own), summed: StepPlan's decode_ctx
    )
    cached_tokens: int  # prefix-cache tokens of the sequences whose prefill starts this step
    sched_s: float = 0.0  # the scheduler's CPU time for this step (schedule + apply), by the driver

    def row(self) -> dict:
        return asdict(self)


class GpuExecutor:
    def __init__(self, model: PagedModel, graphs: DecodeGraphs | None = None):
        self.model = model
        self.graphs = graphs  # decode-only steps replay a CUDA graph when one fits
        self.vocab = model.shape.vocab_size
        self.generated: dict[int, list[int]] = {}  # request id -> sampled tokens, in order
        self._prefill_started: dict[int, int] = {}  # request id -> preemptions at its first chunk
        self.num_steps = 0
        self._cuda = model.pool.k.device.type == "cuda"

    def tokens(self, seq, start: int, n: int) -> np.ndarray:
        """Token ids [n] at positions start.. of prompt ++ generated (a recompute re-reads outputs).

        Prompt ids are the workload's (Llama-3 vocabulary); a smaller test model takes them
        modulo its vocabulary.
        """
        prompt = seq.req.prompt
        if start + n <= len(prompt):
            return prompt[start : start + n] % self.vocab
        out = self.generated[seq.req.request_id]
        full = np.concatenate([prompt % self.vocab, np.asarray(out, dtype=prompt.dtype)])
        return full[start : start + n]

    def run(self, items, start_s: float) -> tuple[float, StepRecord]:
        """Run one step; items are (sequence, new tokens, is_prefill), before the scheduler applies it."""
        t0 = time.perf_counter()
        works, cached = [], 0
        for seq, n, is_prefill in items:
            c = seq.num_computed
            works.append(SeqWork(self.tokens(seq, c, n), c, seq.pages, is_prefill))
            cached += self._cached_at_start(seq, c) if is_prefill else 0
        graphed = (
            self.graphs is not None
            and not any(w.is_prefill for w in works)
            and self.graphs.size_for(len(works)) is not None
        )
        step = None if graphed else self.model.prepare(works)
        if self._cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        t1 = time.perf_counter()
        logits = self.graphs.run(works) if graphed else self.model.forward(step)
        next_ids = greedy(logits)
        if self._cuda:
            end.record()
        sampled = next_ids.tolist()  # the sync
        duration = time.perf_counter() - t0
        self._keep_samples(items, sampled)
        record = self._record(items, start_s, duration, t1 - t0, cached)
        if self._cuda:
            record.gpu_s = begin.elapsed_time(end) / 1e3
        self.num_steps += 1
        return duration, record

    def _cached_at_start(self, seq, context: int) -> int:
        """A sequence's first chunk (of this admission) starts past its prefix-cache hit."""
        rid = seq.req.request_id
        if self._prefill_started.get(rid) == seq.preemptions:
            return 0
        self._prefill_started[rid] = seq.preemptions
        return context

    def _keep_samples(self, items, sampled: list[int]) -> None:
        """The token a sequence emits this step (its prefill completes, or it decodes)."""
        for (seq, n, is_prefill), token in zip(items, sampled, strict=True):
            if is_prefill and seq.num_computed + n < seq.prefill_target:
                continue  # a middle chunk: its sample is not an output
            out = self.generated.setdefault(seq.req.request_id, [])
            if len(out) == seq.num_generated:  # a recompute re-derives outputs it already has
                out.append(int(token))

    def _record(self, items, start_s: float, duration: float, prep: float, cached: int):
        pre = [(seq.num_computed, n) for seq, n, p in items if p]
        dec = [seq.num_computed + 1 for seq, _, p in items if not p]
        return StepRecord(
            step=self.num_steps,
            start_s=start_s,
            duration_s=duration,
            gpu_s=0.0,
            prep_s=prep,
            num_prefill_chunks=len(pre),
            prefill_tokens=sum(n for _, n in pre),
            prefill_ctx_sum=sum(c for c, _ in pre),
            num_decodes=len(dec),
            decode_ctx_sum=sum(dec),
            cached_tokens=cached,
        )

    def forget(self, seq) -> None:
        """A finished request's outputs are no longer needed."""
        self.generated.pop(seq.req.request_id, None)
        self._prefill_started.pop(seq.req.request_id, None)
