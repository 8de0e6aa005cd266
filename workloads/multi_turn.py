"""multi_turn: the multi-round QA benchmark of the vLLM production stack and LMCache.

U users talk for R rounds. Every prompt is the shared system prompt (S tokens), then that user's own
context (C tokens, fixed per user), then the user's history (each earlier round's question of Q
tokens and answer of A tokens), then the new question. The answer of round r (A random tokens,
standing for what the model said) joins the history of round r + 1, so round r + 1's prompt starts
with round r's prompt exactly. Requests come round by round: all users' round 0, then round 1, ...
so a user's previous round was sent U - 1 requests earlier (in closed loop with num_clients <= U it
has usually, not always, finished). The answer is the request's `output`: the simulator generates
exactly those ids, so with cache.cache_outputs the next round also hits the earlier answer's pages.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import Field

from sim.request import Request, Workload
from sim.strict_input import MAX_CLIENTS
from workloads.arrivals import ArrivalFields, make_stream
from workloads.tokens import random_tokens


class MultiTurnParams(ArrivalFields):
    num_users: int = Field(default=10, gt=0)  # U
    num_rounds: int = Field(default=5, gt=0)  # R
    system_prompt_tokens: int = Field(
        default=1000, ge=0
    )  # S (the benchmark's shared system prompt)
    user_context_tokens: int = Field(default=2000, ge=0)  # C (its per-user history prompt)
    question_tokens: int = Field(default=32, gt=0)  # Q
    answer_tokens: int = Field(default=100, gt=0)  # A (the benchmark's answer length)
    num_clients: int = Field(default=10, gt=0, le=MAX_CLIENTS)


def multi_turn_requests(p: MultiTurnParams, rng: np.random.Generator) -> Iterator[Request]:
    system = random_tokens(rng, p.system_prompt_tokens)
    history = [
        np.concatenate([system, random_tokens(rng, p.user_context_tokens)])
        for _ in range(p.num_users)
    ]
    request_id = 0
    for round_ in range(p.num_rounds):
        for user in range(p.num_users):
            prompt = np.concatenate([history[user], random_tokens(rng, p.question_tokens)])
            answer = random_tokens(rng, p.answer_tokens)
            yield Request(
                request_id=request_id,
                prompt=prompt,
                output_tokens=p.answer_tokens,
                session_id=user,
                tag=f"round{round_}",
                output=answer,
            )
            history[user] = np.concatenate([prompt, answer])
            request_id += 1


def make_multi_turn(p: MultiTurnParams, rng: np.random.Generator) -> Workload:
    content_rng, arrival_rng = rng.spawn(2)
    return make_stream(
        "multi_turn", multi_turn_requests(p, content_rng), p, arrival_rng, info=p.model_dump()
    )
