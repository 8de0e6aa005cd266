"""The request type every workload produces and the simulator consumes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class Request:
    request_id: int
    prompt: np.ndarray  # int32 [prompt_tokens]: real token ids; prefix sharing is token equality
    output_tokens: int  # tokens the request generates before it finishes
    arrival_s: float | None = None  # open loop: trace time; closed loop: None (set when sent)
    session_id: int = -1
    priority: int = 0
    tag: str = ""  # workload class for per-class statistics ("shared", "long", "chat", ...)

    @property
    def prompt_tokens(self) -> int:
        return int(self.prompt.shape[0])


@dataclass
class Workload:
    """A stream of requests.

    Open loop (`num_clients is None`): `requests` yields requests in arrival order, each with
    `arrival_s`. Closed loop: `num_clients` clients each send the next request from `requests`
    as soon as their previous one finishes (arrival_s is then set by the simulator).
    """

    name: str
    requests: Iterator[Request]
    num_clients: int | None = None
    info: dict = field(default_factory=dict)
