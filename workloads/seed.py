"""The article's load test: 100 closed-loop clients, 80% share one 2048-token system prompt.

Lengths: the request's own input is uniform in [512, 8192] tokens, and 10% of requests are 32K
(32768) tokens instead. A shared request is the system prompt followed by that input, so its prompt
is 2048 tokens longer (our reading of the article; it does not say whether the 2048 tokens count in
the input length). Output lengths are not in the article: uniform in [128, 512] by default.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.request import Request, Workload
from sim.strict_input import MAX_CLIENTS
from workloads.tokens import random_tokens


class SeedParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    num_clients: int = Field(default=100, gt=0, le=MAX_CLIENTS)
    input_min: int = Field(default=512, gt=0)
    input_max: int = Field(default=8192, gt=0)
    long_share: float = Field(default=0.10, ge=0, le=1)
    long_tokens: int = Field(default=32768, gt=0)
    shared_share: float = Field(default=0.80, ge=0, le=1)
    system_prompt_tokens: int = Field(default=2048, ge=0)
    output_min: int = Field(default=128, gt=0)
    output_max: int = Field(default=512, gt=0)

    @model_validator(mode="after")
    def _ranges(self) -> SeedParams:
        if self.input_min > self.input_max:
            raise ValueError("input_min must be <= input_max")
        if self.output_min > self.output_max:
            raise ValueError("output_min must be <= output_max")
        return self


def seed_requests(p: SeedParams, rng: np.random.Generator) -> Iterator[Request]:
    system_prompt = random_tokens(rng, p.system_prompt_tokens)
    request_id = 0
    while True:
        is_long = rng.random() < p.long_share
        is_shared = rng.random() < p.shared_share
        n_input = p.long_tokens if is_long else int(rng.integers(p.input_min, p.input_max + 1))
        own = random_tokens(rng, n_input)
        prompt = np.concatenate([system_prompt, own]) if is_shared else own
        output = int(rng.integers(p.output_min, p.output_max + 1))
        tag = ("long" if is_long else "short") + ("-shared" if is_shared else "")
        yield Request(request_id=request_id, prompt=prompt, output_tokens=output, tag=tag)
        request_id += 1


def make_seed(p: SeedParams, rng: np.random.Generator) -> Workload:
    return Workload("seed", seed_requests(p, rng), num_clients=p.num_clients, info=p.model_dump())
