"""pollution: the article's pitfall 2, hot long prefixes under bursts of short one-off chats.

S system prompts of P tokens each are shared by long conversations. Conversation c uses system
prompt c mod S; its first turn adds a document of D tokens (uniform in [doc_min, doc_max]) and
each later turn the previous answer plus a question of Q tokens, so turn t + 1 starts with turn t's
prompt exactly. `num_conversations` conversations run side by side, turn by turn; one that has had
`turns` turns is replaced by a new one. The stream alternates a burst of `burst_size` short chats
(fresh random prompts of [chat_min, chat_max] tokens, reused by nobody) and `burst_every` long
requests, starting with a burst.

Tags: "long" (conversation turns) and "chat". What to look at: the long requests' hit rate and P99
TTFT. A pool that lets the chats push the system prompts out makes every long request re-prefill
thousands of tokens.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import Field, model_validator

from sim.request import Request, Workload
from workloads.arrivals import ArrivalFields, make_stream
from workloads.tokens import random_tokens


class PollutionParams(ArrivalFields):
    num_system_prompts: int = Field(default=4, gt=0)  # S
    system_prompt_tokens: int = Field(default=4096, gt=0)  # P
    num_conversations: int = Field(default=16, gt=0)
    turns: int = Field(default=4, gt=0)
    doc_min: int = Field(default=512, ge=0)  # D
    doc_max: int = Field(default=2048, ge=0)
    question_tokens: int = Field(default=128, gt=0)  # Q
    long_output_tokens: int = Field(default=256, gt=0)
    burst_every: int = Field(default=8, gt=0)
    burst_size: int = Field(default=48, ge=0)
    chat_min: int = Field(default=64, gt=0)
    chat_max: int = Field(default=512, gt=0)
    chat_output_tokens: int = Field(default=32, gt=0)

    @model_validator(mode="after")
    def _ranges(self) -> PollutionParams:
        if self.doc_min > self.doc_max:
            raise ValueError("doc_min must be <= doc_max")
        if self.chat_min > self.chat_max:
            raise ValueError("chat_min must be <= chat_max")
        return self


class _Conversations:
    """The long conversations: who talks next and what their prompt is so far."""

    def __init__(self, p: PollutionParams, rng: np.random.Generator):
        self.p, self.rng = p, rng
        self.system = [
            random_tokens(rng, p.system_prompt_tokens) for _ in range(p.num_system_prompts)
        ]
        self.started = 0
        self.slots = [
            self._start() for _ in range(p.num_conversations)
        ]  # (id, history, turns done)
        self.next_slot = 0

    def _start(self) -> tuple[int, np.ndarray, int]:
        conv = self.started
        self.started += 1
        doc = random_tokens(self.rng, int(self.rng.integers(self.p.doc_min, self.p.doc_max + 1)))
        return conv, np.concatenate([self.system[conv % self.p.num_system_prompts], doc]), 0

    def next_prompt(self) -> tuple[int, np.ndarray]:
        """The next turn's (conversation id, prompt); the answer joins its history."""
        slot = self.next_slot
        self.next_slot = (slot + 1) % len(self.slots)
        conv, history, done = self.slots[slot]
        prompt = np.concatenate([history, random_tokens(self.rng, self.p.question_tokens)])
        answer = random_tokens(self.rng, self.p.long_output_tokens)
        done += 1
        self.slots[slot] = (
            self._start()
            if done == self.p.turns
            else (conv, np.concatenate([prompt, answer]), done)
        )
        return conv, prompt


def pollution_requests(p: PollutionParams, rng: np.random.Generator) -> Iterator[Request]:
    conversations = _Conversations(p, rng)
    request_id = 0
    while True:  # a burst first: closed-loop clients then reach the long requests one by one
        for _ in range(p.burst_size):
            prompt = random_tokens(rng, int(rng.integers(p.chat_min, p.chat_max + 1)))
            yield Request(
                request_id=request_id, prompt=prompt, output_tokens=p.chat_output_tokens, tag="chat"
            )
            request_id += 1
        for _ in range(p.burst_every):
            conv, prompt = conversations.next_prompt()
            yield Request(
                request_id=request_id,
                prompt=prompt,
                output_tokens=p.long_output_tokens,
                session_id=conv,
                tag="long",
            )
            request_id += 1


def make_pollution(p: PollutionParams, rng: np.random.Generator) -> Workload:
    content_rng, arrival_rng = rng.spawn(2)
    return make_stream(
        "pollution", pollution_requests(p, content_rng), p, arrival_rng, info=p.model_dump()
    )
