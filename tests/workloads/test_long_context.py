"""The long_context preset: the seed stream with a share of 128K-token requests mixed in."""

from __future__ import annotations

import numpy as np

from workloads.registry import make_workload
from workloads.seed import SeedParams, seed_requests


def take(name: str, params: dict, n: int, seed: int = 0):
    w = make_workload(name, params, np.random.default_rng(seed))
    return [next(w.requests) for _ in range(n)]


def test_long_requests_carry_the_seed_system_prompt_and_the_rest_is_the_seed_stream():
    reqs = take("long_context", {"context_share": 0.2, "context_tokens": 5000}, 300)
    assert [r.request_id for r in reqs] == list(range(300))
    long = [r for r in reqs if r.tag.startswith("xlong")]
    assert 30 < len(long) < 90
    shared = [r for r in long if r.tag == "xlong-shared"]
    assert all(r.prompt_tokens == 2048 + 5000 for r in shared)
    assert all(r.prompt_tokens == 5000 for r in long if r.tag == "xlong")
    seed_like = [r for r in reqs if not r.tag.startswith("xlong")]
    ref_system = next(r for r in seed_like if r.tag.endswith("-shared")).prompt[:2048]
    assert all(np.array_equal(r.prompt[:2048], ref_system) for r in shared)
    # the other requests are exactly the seed stream drawn from the spawned generator
    seed_rng = np.random.default_rng(0).spawn(2)[0]
    ref = seed_requests(SeedParams(), seed_rng)
    for r in seed_like[:20]:
        expected = next(ref)
        assert (
            np.array_equal(r.prompt, expected.prompt) and r.output_tokens == expected.output_tokens
        )


def test_same_seed_same_stream_and_zero_share_has_no_long_requests():
    a, b = take("long_context", {}, 100, 3), take("long_context", {}, 100, 3)
    assert all(
        np.array_equal(x.prompt, y.prompt) and x.tag == y.tag for x, y in zip(a, b, strict=True)
    )
    assert not any(
        r.tag.startswith("xlong") for r in take("long_context", {"context_share": 0}, 200)
    )
