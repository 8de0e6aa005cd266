"""What it costs to rebuild a prompt segment's KV, from the latency model: the admission threshold.

rebuild_s(n) = step(prefill of n tokens) - step(prefill of 1 token): the engine time a segment of n
new tokens adds when it has to be computed again. floor_s = step(prefill of 1 token): the cheapest
engine step (one token still reads every weight once). The break-even length is the largest n with
rebuild_s(n) <= floor_s, rounded down to whole pages (at least one page): rebuilding a segment that
short costs at most one extra minimal step, while caching it takes pool pages a long prefix (whose
rebuild costs many steps) could use. It grows with the step's memory floor (weights / HBM
bandwidth) and shrinks with the per-token compute (layers x (linear + attention) FLOPs, the KV
reads set by layers x KV heads x head_dim): on the roofline model it is about twice the ridge point.
"""

from __future__ import annotations

import numpy as np

from sim.latency import LatencyModel, StepPlan

_EMPTY = np.zeros(0, dtype=np.int64)
MAX_SEGMENT_TOKENS = 1 << 20  # search bound


def prefill_step_s(latency: LatencyModel, num_tokens: int) -> float:
    """One step that prefills num_tokens new tokens with no context (nothing else in the batch)."""
    plan = StepPlan(
        prefill_new=np.array([num_tokens], dtype=np.int64),
        prefill_ctx=np.zeros(1, dtype=np.int64),
        decode_ctx=_EMPTY,
    )
    return latency.step_time_s(plan)


def rebuild_s(latency: LatencyModel, num_tokens: int) -> float:
    return prefill_step_s(latency, num_tokens) - prefill_step_s(latency, 1)


def break_even_tokens(latency: LatencyModel, page_size: int) -> int:
    """Admission threshold in tokens: longest segment whose rebuild costs at most one minimal step."""
    floor_s = prefill_step_s(latency, 1)
    lo, hi = 1, MAX_SEGMENT_TOKENS  # rebuild_s(lo) = 0 <= floor_s; search the last n that holds
    if rebuild_s(latency, hi) <= floor_s:
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if rebuild_s(latency, mid) <= floor_s:
            lo = mid
        else:
            hi = mid
    return max(page_size, lo - lo % page_size)
