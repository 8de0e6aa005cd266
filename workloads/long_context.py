"""Long-context preset: the seed mix plus a share of 128K-token requests.

Each request is, with probability `context_share`, a long-context request of `context_tokens`
input tokens (after the seed's 2048-token system prompt with the seed's shared share), else the
next request of the seed stream. 128K tokens of the article's model is ~25.8 GB of KV (2 x 48
layers x 8 KV heads x 128 dims x 2 bytes x 131072), more than one node may hold beside others:
section 4.3 of the article. Long-context requests are tagged "xlong" (+ "-shared").
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator

import numpy as np
from pydantic import Field

from sim.request import Request, Workload
from workloads.seed import SeedParams, seed_requests
from workloads.tokens import random_tokens


class LongContextParams(SeedParams):
    context_share: float = Field(default=0.05, ge=0, le=1)
    context_tokens: int = Field(default=131072, gt=0)


def long_context_requests(p: LongContextParams, rng: np.random.Generator) -> Iterator[Request]:
    seed_rng, own_rng = rng.spawn(2)
    # The seed stream draws its system prompt first: a copy of its generator gives the same tokens.
    system_prompt = random_tokens(copy.deepcopy(seed_rng), p.system_prompt_tokens)
    seed_stream = seed_requests(p, seed_rng)
    for request_id in itertools.count():
        if own_rng.random() >= p.context_share:
            req = next(seed_stream)
            req.request_id = request_id
            yield req
            continue
        is_shared = own_rng.random() < p.shared_share
        own = random_tokens(own_rng, p.context_tokens)
        prompt = np.concatenate([system_prompt, own]) if is_shared else own
        output = int(own_rng.integers(p.output_min, p.output_max + 1))
        yield Request(
            request_id=request_id,
            prompt=prompt,
            output_tokens=output,
            tag="xlong-shared" if is_shared else "xlong",
        )


def make_long_context(p: LongContextParams, rng: np.random.Generator) -> Workload:
    return Workload(
        "long_context",
        long_context_requests(p, rng),
        num_clients=p.num_clients,
        info=p.model_dump(),
    )
