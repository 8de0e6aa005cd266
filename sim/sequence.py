"""A request's life inside the simulator: what is computed, cached, generated and when."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np

from sim.kv.hashing import page_keys
from sim.request import Request

if TYPE_CHECKING:
    import simpy

    from sim.kv.index_base import Match

_NO_TOKENS = np.zeros(0, dtype=np.int32)
_NO_KEYS = np.zeros(0, dtype=np.uint64)


class Status(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"  # can never be placed (longer than max_model_len or the whole pool)
    UNFINISHED = "unfinished"  # still in flight when the simulation ended


@dataclass(slots=True, eq=False)
class Sequence:
    req: Request
    keys: np.ndarray  # uint64 [num_full_prompt_pages]: chained page keys of the prompt
    arrival_s: float
    prompt_tokens: int = 0  # kept when the prompt itself is dropped at the end
    node: int = -1
    status: Status = Status.WAITING
    num_computed: int = 0  # tokens whose KV exists on the node
    num_generated: int = 0
    recomputed_outputs: int = (
        0  # outputs generated before the last preemption (recomputed as prefill)
    )
    cached_tokens: int = 0  # prompt tokens served from the prefix cache at (first) admission
    pages: list[int] = field(default_factory=list)
    stored_pages: int = 0  # leading prompt pages already offered to the prefix index
    cacheable: bool = True  # admission policy's verdict for this request's new segment
    first_token_s: float = float("nan")
    finish_s: float = float("nan")
    routed_s: float = float("nan")
    scheduled_s: float = float("nan")  # first admitted into a step
    queued_step: int = -1  # its node's count of planned steps when it joined the queue
    preemptions: int = 0
    false_hits: int = 0
    wrong_reuse_tokens: int = 0
    use_after_free: int = 0  # pages handed to this request while a reader of their old owner ran
    last_read_s: float = float("-inf")  # end of the last step that read this request's KV
    kv_tokens: int = 0  # tokens its pages hold or are being written this step (paged)
    oom_blocked: bool = False
    done: simpy.Event | None = None  # closed loop: SimPy event the client waits on
    pending_match: Match | None = None  # paged: the prefix match of an admission not yet committed
    # cache_outputs: prompt + generated ids and their chained page keys, built on first use
    context: np.ndarray | None = None
    context_keys: np.ndarray | None = None
    # `new_sequence` leaves `keys` unset and hashes the prompt on first read (`__getattr__`):
    # runs without prefix caching or a prefix-reading policy never read them.
    key_page_size: int = 0
    key_hash_bits: int = 64

    def __post_init__(self) -> None:
        self.prompt_tokens = self.req.prompt_tokens

    def __getattr__(self, name: str):
        """Called only for an attribute not set: `keys` left for later by `new_sequence`."""
        if name != "keys" or not self.key_page_size:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        keys = self.keys = page_keys(self.req.prompt, self.key_page_size, self.key_hash_bits)
        return keys

    def drop_tokens(self) -> None:
        """The request is over: free its prompt and keys (memory stays proportional to in-flight work)."""
        self.req.prompt = _NO_TOKENS
        self.req.draw_prompt = None  # (never drawn: never will be)
        self.req.output = None
        self.keys = _NO_KEYS
        self.context = self.context_keys = None

    def reset_progress(self) -> None:
        """Its node crashed: nothing computed or generated survives; sent again, it starts over."""
        self.status = Status.WAITING
        self.num_computed = self.num_generated = self.recomputed_outputs = 0
        self.stored_pages = self.kv_tokens = 0
        self.pages = []
        self.oom_blocked = False
        self.first_token_s = float("nan")

    def context_pages(self, page_size: int, hash_bits: int) -> tuple[np.ndarray, np.ndarray]:
        """(int32 [prompt + outputs] token ids, uint64 keys of its full pages): what the cache
        indexes once generated tokens are computed. The prompt's keys are a prefix of these."""
        if self.context is None:
            prompt = self.req.prompt
            self.context = np.concatenate([prompt, self.req.generated_ids()])
            self.context_keys = page_keys(self.context, page_size, hash_bits)
            # the prompt's ids live on as the context's head: one copy of them, not two (at 256
            # nodes, ~6,400 requests in flight hold ~230 MB of prompts)
            self.req.prompt = self.context[: prompt.shape[0]]
            if (page_size, hash_bits) == (self.key_page_size, self.key_hash_bits):
                # so do the prompt's keys (the chained key of a page depends on no later token)
                self.keys = self.context_keys[: prompt.shape[0] // page_size]
        assert self.context_keys is not None  # built with the context
        return self.context, self.context_keys

    @property
    def prefill_target(self) -> int:
        """Tokens to compute before the next token is emitted: the prompt, plus, after a recompute
        preemption, every output generated so far (as vLLM recomputes prompt + outputs and samples
        the next token in the step that completes them)."""
        return self.prompt_tokens + self.recomputed_outputs


def new_sequence(req: Request, page_size: int, hash_bits: int, now: float) -> Sequence:
    """A request enters the system at `now` (its own arrival time if it carries one)."""
    seq = Sequence(
        req=req,
        keys=_NO_KEYS,
        arrival_s=now if req.arrival_s is None else req.arrival_s,
        key_page_size=page_size,
        key_hash_bits=hash_bits,
    )
    del seq.keys  # hashed from the prompt when first read (see Sequence.__getattr__)
    return seq
