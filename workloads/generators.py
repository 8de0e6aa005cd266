"""Synthetic generators people benchmark prefix caching with (besides the seed and multi_turn).

shared_prefix_groups: SGLang's generated-shared-prefix benchmark. G groups, each with its own
  system prompt of S tokens; P questions of Q tokens per group; each request is one group's system
  prompt followed by one question, generating O tokens. G x P requests, shuffled unless `ordered`.
no_sharing: every prompt is fresh random tokens (the article's counter-example: reuse gives nothing).
Each takes the arrival fields of `arrivals.ArrivalFields` (closed loop by default).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import Field, model_validator

from sim.request import Request, Workload
from workloads.arrivals import ArrivalFields, make_stream
from workloads.tokens import random_tokens


class SharedPrefixGroupsParams(ArrivalFields):
    num_groups: int = Field(default=64, gt=0)  # G
    prompts_per_group: int = Field(default=16, gt=0)  # P
    system_prompt_tokens: int = Field(default=2048, ge=0)  # S
    question_tokens: int = Field(default=128, gt=0)  # Q
    output_tokens: int = Field(default=256, gt=0)  # O
    ordered: bool = False  # True: group by group; False: shuffled (SGLang's default)


def shared_prefix_requests(
    p: SharedPrefixGroupsParams, rng: np.random.Generator
) -> Iterator[Request]:
    system_prompts = [random_tokens(rng, p.system_prompt_tokens) for _ in range(p.num_groups)]
    slots = np.repeat(np.arange(p.num_groups), p.prompts_per_group)  # group of each request
    if not p.ordered:
        slots = rng.permutation(slots)
    for request_id, group in enumerate(slots.tolist()):
        question = random_tokens(rng, p.question_tokens)
        yield Request(
            request_id=request_id,
            prompt=np.concatenate([system_prompts[group], question]),
            output_tokens=p.output_tokens,
            session_id=group,
            tag="shared_prefix",
        )


def make_shared_prefix_groups(p: SharedPrefixGroupsParams, rng: np.random.Generator) -> Workload:
    content_rng, arrival_rng = rng.spawn(2)
    return make_stream(
        "shared_prefix_groups",
        shared_prefix_requests(p, content_rng),
        p,
        arrival_rng,
        info=p.model_dump(),
    )


class NoSharingParams(ArrivalFields):
    input_min: int = Field(default=512, gt=0)
    input_max: int = Field(default=8192, gt=0)
    output_min: int = Field(default=128, gt=0)
    output_max: int = Field(default=512, gt=0)
    num_requests: int | None = Field(default=None, gt=0)  # None: endless

    @model_validator(mode="after")
    def _ranges(self) -> NoSharingParams:
        if self.input_min > self.input_max:
            raise ValueError("input_min must be <= input_max")
        if self.output_min > self.output_max:
            raise ValueError("output_min must be <= output_max")
        return self


def no_sharing_requests(p: NoSharingParams, rng: np.random.Generator) -> Iterator[Request]:
    request_id = 0
    while p.num_requests is None or request_id < p.num_requests:
        prompt = random_tokens(rng, int(rng.integers(p.input_min, p.input_max + 1)))
        output = int(rng.integers(p.output_min, p.output_max + 1))
        yield Request(request_id=request_id, prompt=prompt, output_tokens=output, tag="unique")
        request_id += 1


def make_no_sharing(p: NoSharingParams, rng: np.random.Generator) -> Workload:
    content_rng, arrival_rng = rng.spawn(2)
    return make_stream(
        "no_sharing", no_sharing_requests(p, content_rng), p, arrival_rng, info=p.model_dump()
    )
