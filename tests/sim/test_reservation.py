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


def _fragmented(on_oom: str) -> ContiguousKV:
    """Three 1000-token regions fill 3000 tokens; freeing the outer two leaves 2000 free tokens
    in two 1000-token holes."""
    kv = ContiguousKV(ContiguousAllocator(3000, 3000), 1, 100, 4000, on_oom=on_oom)
    held = [_seq(i, 900, 1) for i in range(3)]
    assert all(kv.admit(s, 0.0) for s in held)
    kv.free(held[0]), kv.free(held[2])
    return kv


def test_fragmentation_takes_the_on_oom_action_a_full_pool_waits():
    for mode in ("wait", "reject", "crash"):
        kv = _fragmented(mode)
        fragmented, full = _seq(3, 1400, 1), _seq(4, 2900, 1)  # 1500 <= 2000 free; 3000 > 2000
        assert not kv.admit(fragmented, 0.0) and not kv.admit(full, 0.0)
        assert (kv.oom_action(fragmented), kv.oom_action(full)) == (mode, "wait")


def test_each_stalled_request_counts_once():
    kv = _fragmented("crash")
    full = _seq(4, 2900, 1)
    assert not kv.admit(full, 0.0) and not kv.admit(full, 1.0)
    assert not kv.admit(_seq(3, 1400, 1), 1.0)  # fragmentation under crash: not a stall
    assert kv.oom_events == 1


def test_reset_gives_back_an_empty_pool():
    kv = _kv("max_model_len")
    kv.admit(_seq(0, 10, 1), 0.0)
    kv.reset()
    assert (kv.alloc.used_bytes, kv.alloc.pool_bytes, kv.live_tokens) == (0, 0, 0)
