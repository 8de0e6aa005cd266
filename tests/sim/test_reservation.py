"""The contiguous baseline's reservation variants and its wait/reject accounting."""

from __future__ import annotations

import numpy as np

from sim.kv.contiguous import ContiguousAllocator
from sim.kv.manager import ContiguousKV
from sim.sequence import Sequence
from tests.helpers import make_request


def _seq(request_id: int, prompt: int, output: int) -> Sequence:
    req = make_request(request_id, np.zeros(prompt, dtype=np.int32), output_tokens=output)
    return Sequence(req=req, keys=np.zeros(0, dtype=np.uint64), arrival_s=0.0)


def _kv(reservation: str, on_oom: str = "wait", capacity_tokens: int = 10_000) -> ContiguousKV:
    alloc = ContiguousAllocator(capacity_tokens, segment_bytes=capacity_tokens)
    return ContiguousKV(alloc, 1, 100, 4000, reservation, on_oom)


def test_prompt_plus_max_new_tokens_caps_at_max_model_len():
    kv = _kv("prompt_plus_max_new_tokens")
    assert kv.reservation_tokens(_seq(0, 500, 20)) == 600  # prompt + max_new_tokens
    assert kv.reservation_tokens(_seq(1, 500, 300)) == 800  # the request's own output is longer
    assert kv.reservation_tokens(_seq(2, 3950, 20)) == 4000  # capped at max_model_len


def test_max_model_len_reserves_the_whole_window_for_everyone():
    kv = _kv("max_model_len")
    assert kv.reservation_tokens(_seq(0, 500, 20)) == 4000
    assert [kv.admit(_seq(i, 10, 1), 0.0) for i in range(3)] == [True, True, False]


def test_only_wait_counts_alloc_stalls():
    for mode, stalls in [("wait", 1), ("reject", 0), ("crash", 0)]:
        kv = _kv("max_model_len", mode)
        kv.admit(_seq(0, 10, 1), 0.0), kv.admit(_seq(1, 10, 1), 0.0)
        blocked = _seq(2, 10, 1)
        assert not kv.admit(blocked, 0.0) and not kv.admit(blocked, 1.0)  # counted once
        assert kv.oom_events == stalls


def test_reset_gives_back_an_empty_pool():
    kv = _kv("max_model_len")
    kv.admit(_seq(0, 10, 1), 0.0)
    kv.reset()
    assert (kv.alloc.used_bytes, kv.alloc.pool_bytes, kv.live_tokens) == (0, 0, 0)
