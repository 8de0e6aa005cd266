"""cache.cache_outputs: full pages of generated tokens are indexed, so a later round that quotes
an earlier answer reuses it."""

from __future__ import annotations

import numpy as np
import pytest

from kvsched.experiment import run_arm
from sim.config import parse_config
from sim.request import Request


def _two_rounds(cache_outputs: bool):
    # One user, two rounds. Round 0: 64 context + 16 question = 80 prompt tokens, 40 answer tokens:
    # its KV holds 80 + 39 tokens (the last answer token is never fed back), 7 full pages.
    # Round 1 = round 0's prompt + its answer + 16 question = 136 tokens.
    cfg = parse_config(
        {
            "duration_s": 60,
            "cluster": {"num_nodes": 1},
            "cache": {"cache_outputs": cache_outputs},
            "workload": {
                "name": "multi_turn",
                "params": {
                    "num_users": 1,
                    "num_rounds": 2,
                    "num_clients": 1,
                    "system_prompt_tokens": 0,
                    "user_context_tokens": 64,
                    "question_tokens": 16,
                    "answer_tokens": 40,
                },
            },
        }
    )
    _, _, requests, _ = run_arm(cfg, "test", show_progress=False)
    return requests.set_index("tag")


@pytest.mark.parametrize(("cache_outputs", "cached"), [(False, 80), (True, 112)])
def test_next_round_hits_the_answer_pages_only_with_cache_outputs(cache_outputs, cached):
    r = _two_rounds(cache_outputs)
    assert r.loc["round1", "prompt_tokens"] == 136
    assert r.loc["round1", "cached_tokens"] == cached  # 5 prompt pages, or 7 with the answer's


def test_generated_ids_are_the_workloads_or_unique_per_request():
    answer = np.arange(5, dtype=np.int32)
    given = Request(0, np.zeros(3, dtype=np.int32), 5, output=answer)
    assert given.generated_ids() is answer
    a, b = (Request(i, np.zeros(3, dtype=np.int32), 8).generated_ids() for i in (1, 2))
    assert a.dtype == np.int32 and (a >= 0).all() and a.shape == (8,)
    assert not np.array_equal(a, b)
    assert np.array_equal(a, Request(1, np.ones(9, dtype=np.int32), 8).generated_ids())
