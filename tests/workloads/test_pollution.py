"""pollution workload: burst/long pattern, shared system prompts, conversations that extend their prompt."""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from sim.config import ConfigError
from workloads.registry import make_workload

PARAMS = {
    "num_system_prompts": 2,
    "system_prompt_tokens": 64,
    "num_conversations": 2,
    "turns": 2,
    "doc_min": 16,
    "doc_max": 32,
    "question_tokens": 8,
    "long_output_tokens": 4,
    "burst_every": 2,
    "burst_size": 3,
    "chat_min": 5,
    "chat_max": 9,
    "chat_output_tokens": 2,
}


def take(n: int, **over):
    wl = make_workload("pollution", {**PARAMS, **over}, np.random.default_rng(0))
    return wl, list(islice(wl.requests, n))


def test_bursts_alternate_with_long_requests():
    wl, reqs = take(15)
    assert wl.num_clients == 64  # closed loop by default
    assert [r.tag for r in reqs] == (["chat"] * 3 + ["long"] * 2) * 3
    assert [r.request_id for r in reqs] == list(range(15))
    chats = [r for r in reqs if r.tag == "chat"]
    assert all(5 <= r.prompt_tokens <= 9 and r.output_tokens == 2 for r in chats)


def test_conversations_share_system_prompts_and_extend_their_own_prompt():
    _, reqs = take(20)
    long = [r for r in reqs if r.tag == "long"]  # conversations 0, 1, 0, 1 (turn 2), then 2, 3, ...
    assert [r.session_id for r in long] == [0, 1, 0, 1, 2, 3, 2, 3]
    first, second = long[0], long[2]
    assert (second.prompt[: first.prompt_tokens] == first.prompt).all()  # turn 2 starts with turn 1
    assert second.prompt_tokens == first.prompt_tokens + 4 + 8  # + the answer + the next question
    assert (long[4].prompt[:64] == long[0].prompt[:64]).all()  # conversation 2 uses system prompt 0
    assert not (long[1].prompt[:64] == long[0].prompt[:64]).all()


def test_bad_params_name_the_field():
    with pytest.raises(ConfigError, match="workload.params"):
        make_workload("pollution", {"chat_min": 10, "chat_max": 5}, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="workload.params.burst_every"):
        make_workload("pollution", {"burst_every": 0}, np.random.default_rng(0))
