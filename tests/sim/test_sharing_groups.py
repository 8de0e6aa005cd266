"""`SharingGroups` (a group's shared prefix found from its last step's) gives every step the
groups `_groups` finds from scratch, as block tables grow, requests start over with new tables
and join or leave the batch; prices skip the longest context only where the model ignores it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cascade import CascadeExecutor, SharingGroups, _groups
from sim.config import parse_config
from sim.latency import make_latency_model
from sim.scheduler import Step
from sim.sequence import new_sequence
from tests.helpers import make_request

PAGE = 16

REQUESTS = 5
# per step: (request, what it does): 0 appends a page all its group may share (most moves), 1 a
# page of its own, 2 starts over on a new table, 3 leaves or joins the batch
move = st.sampled_from([0, 0, 0, 0, 1, 2, 3])
steps = st.lists(
    st.lists(st.tuples(st.integers(0, REQUESTS - 1), move), max_size=4), min_size=1, max_size=30
)


def sequence(request_id: int, pages: list[int]):
    seq = new_sequence(make_request(request_id, np.arange(8)), PAGE, 64, 0.0)
    seq.pages = pages
    seq.num_computed = len(pages) * PAGE - 1
    return seq


@settings(max_examples=300, deadline=None)
@given(steps, st.integers(1, 2))
def test_groups_found_step_after_step_are_the_groups_found_afresh(moves, prefixes):
    # requests start on one of a few shared prefixes (page ids 0..), unique pages from 1000 on
    seqs = [sequence(r, [r % prefixes, 10 + r % prefixes]) for r in range(REQUESTS)]
    in_batch = [True] * REQUESTS
    fresh = iter(range(1000, 10**6))
    tracker = SharingGroups(max_entries=5)  # small: entries are dropped along the way
    for step in moves:
        for r, move in step:
            seq = seqs[r]
            if move == 0:
                seq.pages.append(100 + len(seq.pages))  # the same id at the same position
            elif move == 1:
                seq.pages.append(next(fresh))
            elif move == 2:
                seq.pages = [r % prefixes, next(fresh)]  # a preempted request starts over
            else:
                in_batch[r] = not in_batch[r]
        items = [(seq, 1, False) for seq, on in zip(seqs, in_batch, strict=True) if on]
        assert tracker.find(items, PAGE) == _groups(items, PAGE, None)


def test_prices_without_the_longest_context_where_the_model_does_not_read_it():
    """A model without measured shared-read or ragged terms prices a step the same whatever its
    longest context: the executors skip looking for it, and price as if they had."""
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    rng = np.random.default_rng(7)
    skips, reference = CascadeExecutor(latency, None, PAGE), CascadeExecutor(latency, None, PAGE)
    assert not skips._reads_longest
    reference._reads_longest = True  # every price with the step's longest context
    for _ in range(40):
        shared = list(range(int(rng.integers(1, 200))))
        items = []
        for i in range(int(rng.integers(1, 64))):
            own = [1000 + 4 * i + j for j in range(int(rng.integers(1, 4)))]
            prefix = shared if rng.random() < 0.7 else []
            items.append((sequence(i, [*prefix, *own]), 1, False))
        step = Step(items=items)
        assert skips.compute_s(step) == reference.compute_s(step)
        first = step.shape().decode_ctx_sum + len(items)
        sums = range(first, first + 30 * len(items), len(items))
        assert skips.decode_span_prices(step, sums) == reference.decode_span_prices(step, sums)
