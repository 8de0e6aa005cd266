"""A batch decode ends while a request waits (new work cut a decode span): the node applies it
and plans the same decodes in place (`repeat_decode`), then the admissions
(`admit_after_decodes`). That must be exactly `apply` then `schedule`: the same step, the same
requests, pages, counts and pool, on page boundaries and with a head that does not fit."""

from __future__ import annotations

import numpy as np
import pytest

from tests.sim.test_scheduler import make_scheduler, seq_of, shape


def decoding(prompts: list[int], waiting_prompt: int, num_pages: int):
    """A scheduler whose running requests just ran a batch decode (planned, not applied), and
    one request waiting."""
    sched, cache = make_scheduler(num_pages=num_pages)
    for i, n in enumerate(prompts):
        sched.add(seq_of(i, np.arange(n), output_tokens=40))
    sched.apply(sched.schedule(0.0), 0.01)  # prefill: each takes its first token
    step = sched.schedule(0.01)  # the batch decode
    assert sched.is_batch_decode(step)
    sched.add(seq_of(99, np.arange(waiting_prompt), output_tokens=5))
    return sched, cache, step


def state(sched, cache) -> tuple:
    seqs = [*sched.running, *sched.waiting]
    per_seq = [
        (s.req.request_id, s.num_computed, s.num_generated, list(s.pages), s.kv_tokens, s.status)
        for s in seqs
    ]
    kv = sched.kv
    pool = cache.pool
    return (
        per_seq,
        sched.num_planned,
        sched.waiting_prompt_tokens,
        (kv.live_tokens, kv.slot_tokens, kv.held_tokens),
        (pool.free_pages().tolist(), pool.ref_count.tolist(), pool.epochs.epoch),
    )


@pytest.mark.parametrize(
    "prompts, waiting_prompt, num_pages",
    [
        ([20, 33], 50, 64),  # the head is admitted
        ([31, 15, 47], 16, 64),  # a decode's next token opens a page (31 + 1 + 1 = 33)
        ([20, 33], 400, 16),  # the head does not fit: nothing admitted
    ],
)
def test_repeat_then_admit_is_apply_then_schedule(prompts, waiting_prompt, num_pages):
    ref, ref_cache, ref_step = decoding(prompts, waiting_prompt, num_pages)
    fast, fast_cache, fast_step = decoding(prompts, waiting_prompt, num_pages)
    now = 0.02
    assert ref.apply(ref_step, now) == []
    want = ref.schedule(now)
    seqs = [seq for seq, _, _ in fast_step.items]
    assert fast.would_admit(len(seqs)) and fast.decodes_fit(seqs)
    assert not fast.can_repeat_decode(seqs)
    fast.repeat_decode(seqs, now)
    got = fast.admit_after_decodes(seqs, now)
    assert shape(got) == shape(want)
    assert [s.req.request_id for s in got.admitted] == [s.req.request_id for s in want.admitted]
    assert (got.preempted, got.rejected, got.crashed) == ([], [], False)
    assert (want.preempted, want.rejected, want.crashed) == ([], [], False)
    assert state(fast, fast_cache) == state(ref, ref_cache)
