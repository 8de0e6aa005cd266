"""steps.csv: one row per executed step per node, written by simulations (`record_steps`) and by
the engine (measured durations) alike, so the timeline and `kvsched validate` read both."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.latency.base import StepPlan
from sim.scheduler import Step

STEP_COLUMNS = [
    "node",
    "step",  # running index over the arm's steps (all nodes)
    "start_s",
    "duration_s",
    "num_prefill",  # prefill chunks in the step
    "prefill_tokens",  # new tokens those chunks compute
    "prefill_ctx_sum",  # tokens already in KV before each chunk, summed
    "num_decode",
    "decode_ctx_sum",  # context length of each decode (tokens in KV incl. the new one), summed
    "cached_tokens",  # prefix-cache tokens served to the requests this step admitted
    "batch_size",
    "preempted",  # running requests preempted while planning the step
    "prefill_chunks",  # each chunk as "new@context", ";"-separated (prices a step exactly)
]


def step_row(node: int, index: int, start_s: float, duration_s: float, step: Step) -> tuple:
    """The step's row, from its items before `apply` advances them."""
    num_prefill = prefill_tokens = prefill_ctx = num_decode = decode_ctx = 0
    chunks = []
    for seq, n, is_prefill in step.items:
        if is_prefill:
            num_prefill += 1
            prefill_tokens += n
            prefill_ctx += seq.num_computed
            chunks.append(f"{n}@{seq.num_computed}")
        else:
            num_decode += 1
            decode_ctx += seq.num_computed + 1
    cached = sum(s.num_computed for s in step.admitted if s.preemptions == 0)
    return (
        node,
        index,
        start_s,
        duration_s,
        num_prefill,
        prefill_tokens,
        prefill_ctx,
        num_decode,
        decode_ctx,
        cached,
        len(step.items),
        len(step.preempted),
        ";".join(chunks),
    )


def steps_frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


EVENT_COLUMNS = ["time_s", "node", "kind", "request_id", "value"]


def preempt_events(node: int, start_s: float, step: Step) -> list[tuple]:
    """events.csv rows for the requests preempted while planning `step` (value: the tokens it
    must recompute, prompt plus generated)."""
    return [
        (start_s, node, "preempt", s.req.request_id, s.prompt_tokens + s.num_generated)
        for s in step.preempted
    ]


def events_frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=EVENT_COLUMNS)


def step_plan(row) -> StepPlan:
    """The StepPlan of one steps.csv row (a pandas row or a dict): what a latency model prices."""
    chunks = [c.split("@") for c in str(row["prefill_chunks"] or "").split(";") if "@" in c]
    num_decode, decode_ctx_sum = int(row["num_decode"]), int(row["decode_ctx_sum"])
    # Decode contexts enter the price through their count and sum only (bilinear tables and the
    # roofline are linear in context), so equal shares reproduce the step's price.
    base, extra = divmod(decode_ctx_sum, num_decode) if num_decode else (0, 0)
    decode = [base + (1 if i < extra else 0) for i in range(num_decode)]
    return StepPlan(
        prefill_new=np.array([int(n) for n, _ in chunks], dtype=np.int64),
        prefill_ctx=np.array([int(c) for _, c in chunks], dtype=np.int64),
        decode_ctx=np.array(decode, dtype=np.int64),
    )
