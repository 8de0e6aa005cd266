"""A trace's random prompt ids are drawn only when read, and are the ids drawn at once."""

from __future__ import annotations

import numpy as np

from sim.request import Request
from workloads.tokens import TokenStream, random_tokens
from workloads.trace import AzurePrefix, TraceParams, trace_requests
from workloads.trace_data import Trace


def test_ids_read_in_any_order_are_the_ids_taken_in_order():
    for seed in range(6):
        rng = np.random.default_rng(seed + 50)
        lengths = rng.integers(0, 3000, size=200).tolist()
        lengths[::7] = [1] * len(lengths[::7])  # odd lengths: the spare half word carries over
        one_by_one = np.random.default_rng([seed, 0])
        want = [random_tokens(one_by_one, n).tolist() for n in lengths]
        stream = TokenStream(np.random.default_rng([seed, 0]), chunk=4096)
        starts = [stream.reserve(n) for n in lengths]
        assert stream._drawn == 0  # nothing drawn before a read
        order = rng.permutation(len(lengths))
        for i in order[: len(order) // 2]:  # half of them, shuffled
            assert stream.ids(starts[i], lengths[i]).tolist() == want[i]
        for i in order[len(order) // 2 :]:
            got = stream.ids(starts[i], lengths[i])
            assert got.dtype == np.int32 and got.tolist() == want[i]
        # every chunk read whole is dropped: only the last may be kept (ids not handed out yet)
        assert set(stream._chunks) <= {stream._starts[-1]}


def _azure_trace(n: int) -> Trace:
    rng = np.random.default_rng(7)
    empty = np.zeros(n + 1, dtype=np.int64)  # no block ids, no explicit tokens: lengths only
    return Trace(
        path="unused.csv",
        format="azure",
        arrival_s=np.arange(n, dtype=float),
        input_length=rng.integers(1, 900, size=n),
        output_length=rng.integers(1, 50, size=n),
        request_id=np.arange(n),
        session_id=np.full(n, -1),
        priority=np.zeros(n, dtype=np.int64),
        block_size=0,
        block_start=empty,
        block_ids=np.zeros(0, dtype=np.int64),
        token_start=empty,
        tokens=np.zeros(0, dtype=np.int32),
    )


def _eager_prompts(trace: Trace, prefix: AzurePrefix | None, seed: int) -> list[list[int]]:
    """Each row's prompt as drawn at once, row by row (what the trace built before)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(len(trace)):
        length = int(trace.input_length[i])
        k = -1 if prefix is None else int(prefix.prefix_of_row[i])
        if k < 0:
            out.append(random_tokens(rng, length).tolist())
        else:
            head = prefix.prefixes[k][: min(prefix.tokens, length - 1)]  # type: ignore[union-attr]
            own = random_tokens(rng, length - head.shape[0])
            out.append(np.concatenate([head, own]).tolist())
    return out


def test_trace_prompts_are_drawn_when_read_and_are_the_eager_ones():
    trace = _azure_trace(300)
    params = TraceParams(
        path="unused.csv", format="azure", shared_prefix_tokens=40, shared_prefix_share=0.5
    )
    for prefix in (None, AzurePrefix(params, len(trace), np.random.default_rng(3))):
        want = _eager_prompts(trace, prefix, seed=11)
        requests: list[Request] = list(
            trace_requests(trace, None, np.random.default_rng(11), prefix)
        )
        assert all(r.draw_prompt is not None for r in requests)  # none drawn yet
        assert [r.prompt_tokens for r in requests] == trace.input_length.tolist()
        for i in np.random.default_rng(5).permutation(len(requests)):
            assert requests[i].prompt.tolist() == want[i]
            assert requests[i].draw_prompt is None
            assert requests[i].prompt_tokens == len(want[i])
