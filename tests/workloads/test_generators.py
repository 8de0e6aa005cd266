"""Generators: exact structure, arrival processes, determinism under a seed, bad params."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import ConfigError
from sim.kv.hashing import page_keys
from workloads import make_workload


def generate(name, seed=0, **params):
    w = make_workload(name, params, np.random.default_rng(seed))
    return w, list(w.requests)


SPG = dict(
    num_groups=3, prompts_per_group=2, system_prompt_tokens=8, question_tokens=4, output_tokens=5
)


def test_shared_prefix_groups_ordered_structure():
    w, reqs = generate("shared_prefix_groups", **SPG, ordered=True)
    assert w.num_clients == 64 and len(reqs) == 6
    assert [r.session_id for r in reqs] == [0, 0, 1, 1, 2, 2]
    assert all(r.prompt_tokens == 12 and r.output_tokens == 5 for r in reqs)
    for a, b in zip(
        reqs[::2], reqs[1::2], strict=True
    ):  # same group: the same 8 tokens, token for token
        assert np.array_equal(a.prompt[:8], b.prompt[:8]) and not np.array_equal(
            a.prompt[8:], b.prompt[8:]
        )
    assert not np.array_equal(reqs[0].prompt[:8], reqs[2].prompt[:8])


def test_shared_prefix_groups_shuffled_keeps_the_groups():
    _, reqs = generate("shared_prefix_groups", seed=4, **SPG)
    assert sorted(r.session_id for r in reqs) == [0, 0, 1, 1, 2, 2]
    assert [r.session_id for r in reqs] != [0, 0, 1, 1, 2, 2]  # this seed shuffles
    prefix_of = {}
    for r in reqs:
        assert np.array_equal(prefix_of.setdefault(r.session_id, r.prompt[:8]), r.prompt[:8])
    assert [r.request_id for r in reqs] == list(range(6))


def test_shared_prefix_groups_defaults_are_sglangs():
    info = make_workload("shared_prefix_groups", {}, np.random.default_rng(0)).info
    assert (
        info["num_groups"],
        info["prompts_per_group"],
        info["system_prompt_tokens"],
        info["question_tokens"],
        info["output_tokens"],
    ) == (64, 16, 2048, 128, 256)


MT = dict(
    num_users=2,
    num_rounds=3,
    system_prompt_tokens=4,
    user_context_tokens=3,
    question_tokens=2,
    answer_tokens=5,
)


def test_multi_turn_structure():
    w, reqs = generate("multi_turn", **MT)
    assert w.num_clients == 10 and len(reqs) == 6
    assert [r.session_id for r in reqs] == [0, 1, 0, 1, 0, 1]
    assert [r.tag for r in reqs] == ["round0", "round0", "round1", "round1", "round2", "round2"]
    assert [r.prompt_tokens for r in reqs] == [9, 9, 16, 16, 23, 23]  # S + C + r (Q + A) + Q
    assert all(r.output_tokens == 5 for r in reqs)
    system = reqs[0].prompt[:4]
    assert all(np.array_equal(r.prompt[:4], system) for r in reqs)  # one system prompt for everyone
    assert not np.array_equal(reqs[0].prompt[4:7], reqs[1].prompt[4:7])  # per-user context
    for user in (0, 1):
        rounds = [r.prompt for r in reqs if r.session_id == user]
        for before, after in zip(rounds, rounds[1:], strict=False):
            assert np.array_equal(
                after[: before.shape[0]], before
            )  # the history grows, never changes


def test_no_sharing_has_no_common_pages():
    _, reqs = generate(
        "no_sharing", num_requests=30, input_min=32, input_max=64, output_min=1, output_max=3
    )
    assert len(reqs) == 30
    assert all(32 <= r.prompt_tokens <= 64 and 1 <= r.output_tokens <= 3 for r in reqs)
    firsts = [int(page_keys(r.prompt, 16)[0]) for r in reqs]
    assert len(set(firsts)) == 30


@pytest.mark.parametrize("name", ["shared_prefix_groups", "multi_turn", "no_sharing"])
def test_deterministic_under_a_seed(name):
    params = {"shared_prefix_groups": SPG, "multi_turn": MT, "no_sharing": {"num_requests": 5}}[
        name
    ]
    _, a = generate(name, seed=7, **params)
    _, b = generate(name, seed=7, **params)
    _, c = generate(name, seed=8, **params)
    assert all(
        np.array_equal(x.prompt, y.prompt) and x.output_tokens == y.output_tokens
        for x, y in zip(a, b, strict=True)
    )
    assert any(not np.array_equal(x.prompt, y.prompt) for x, y in zip(a, c, strict=True))


def test_poisson_and_gamma_arrivals():
    _, poisson = generate(
        "no_sharing", num_requests=4000, input_min=1, input_max=2, arrival="poisson", rate=10.0
    )
    _, gamma = generate(
        "no_sharing",
        num_requests=4000,
        input_min=1,
        input_max=2,
        arrival="gamma",
        rate=10.0,
        cv=3.0,
    )
    for reqs, cv in ((poisson, 1.0), (gamma, 3.0)):
        t = np.array([r.arrival_s for r in reqs])
        gaps = np.diff(t)
        assert t[0] == 0.0 and np.all(gaps >= 0)
        assert gaps.mean() == pytest.approx(0.1, rel=0.1)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.15)


def test_content_does_not_depend_on_the_arrival_process():
    _, closed = generate("shared_prefix_groups", **SPG)
    w, timed = generate("shared_prefix_groups", **SPG, arrival="gamma", rate=5.0, cv=2.0)
    assert w.num_clients is None and all(r.arrival_s is None for r in closed)
    assert all(np.array_equal(a.prompt, b.prompt) for a, b in zip(closed, timed, strict=True))


@pytest.mark.parametrize(
    "params, message",
    [
        ({"arrival": "poisson"}, "arrival poisson needs rate"),
        ({"rate": 3.0}, "rate applies to arrival poisson or gamma"),
        ({"arrival": "poisson", "rate": 1.0, "cv": 2.0}, "cv applies to arrival gamma only"),
        (
            {"arrival": "poisson", "rate": 1.0, "num_clients": 4},
            "num_clients applies to arrival closed",
        ),
        (
            {"arrival": "uniform"},
            "workload.params.arrival: Input should be 'closed', 'poisson' or 'gamma'",
        ),
        ({"input_min": 9, "input_max": 3}, "input_min must be <= input_max"),
    ],
)
def test_bad_generator_params(params, message):
    with pytest.raises(ConfigError) as err:
        make_workload("no_sharing", params, np.random.default_rng(0))
    assert message in str(err.value)


def test_unknown_workload_lists_the_generators():
    with pytest.raises(ConfigError) as err:
        make_workload("sharegpt", {}, np.random.default_rng(0))
    for name in ("multi_turn", "no_sharing", "seed", "shared_prefix_groups", "trace"):
        assert name in str(err.value)
