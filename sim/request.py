"""The request type every workload produces and the simulator consumes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from sim.kv.hashing import mix64

_OUTPUT_SALT = np.uint64(0x6F75747075742D31)  # "output-1": synthetic generated ids


@dataclass(slots=True)
class Request:
    request_id: int
    prompt: np.ndarray  # int32 [prompt_tokens]: real token ids; prefix sharing is token equality
    output_tokens: int  # tokens the request generates before it finishes
    arrival_s: float | None = None  # open loop: trace time; closed loop: None (set when sent)
    session_id: int = -1
    priority: int = 0
    tag: str = ""  # workload class for per-class statistics ("shared", "long", "chat", ...)
    # int32 [output_tokens]: the ids the model generates, when the workload knows them (multi_turn:
    # the answer its next round's prompt quotes). None: ids unique to this request (generated_ids).
    output: np.ndarray | None = None
    # A prompt drawn when first read (`prompt` left unset: `__getattr__`), as a trace's random
    # ids are (a run that never reads them never draws them): what draws it, and its length.
    draw_prompt: Callable[[], np.ndarray] | None = field(default=None, repr=False, compare=False)
    undrawn_tokens: int = 0

    def __getattr__(self, name: str):
        """Called only for an attribute not set: a `prompt` left to `draw_prompt`."""
        draw = self.draw_prompt
        if name != "prompt" or draw is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        prompt = self.prompt = draw()
        self.draw_prompt = None
        return prompt

    @property
    def prompt_tokens(self) -> int:
        if self.draw_prompt is not None:  # not drawn yet
            return self.undrawn_tokens
        return int(self.prompt.shape[0])

    def generated_ids(self) -> np.ndarray:
        """int32 [output_tokens]: the token ids this request generates (deterministic)."""
        if self.output is not None:
            return self.output
        position = np.arange(self.output_tokens, dtype=np.uint64)
        with np.errstate(over="ignore"):
            x = mix64(mix64(np.uint64(self.request_id) ^ _OUTPUT_SALT) + position * _OUTPUT_SALT)
        return (x >> np.uint64(33)).astype(np.int32)  # 31 bits: non-negative int32 ids


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
    # A trace's own ids where they are text: request_id -> id as written (requests.csv shows it).
    request_labels: dict[int, str] | None = None
