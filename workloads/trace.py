"""Trace replay: `workload: {name: trace, params: {path: FILE, format: mooncake|azure|jsonl, ...}}`.

Replay options, applied in this order:
  window     keep rows with start_s <= arrival < end_s (trace seconds), rebased to start at 0;
  cut        then keep the first max_requests of them;
  timing     open loop on the trace's timestamps divided by time_scale (2 = twice as fast), or
             rescaled so the mean arrival rate is `rate` req/s; or closed loop with num_clients
             clients that ignore the timestamps.
Prompts are built lazily, one request at a time as the simulator pulls it from the iterator.
Azure rows carry no content: each prompt is random tokens, optionally starting with a synthetic
shared prefix (rule in `AzurePrefix`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import lru_cache, partial
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.config import ConfigError
from sim.request import Request, Workload
from sim.strict_input import MAX_CLIENTS
from workloads.tokens import TokenStream, keyed_tokens
from workloads.trace_data import Trace
from workloads.trace_loaders import load_trace

_UNDRAWN = np.zeros(0, dtype=np.int32)  # a prompt's place until it is drawn (then unset)

PREFIX_SALT = 0x5EED  # keeps synthetic Azure prefixes apart from trace block ids


class TraceParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str  # relative paths are read from the working directory (the repo root for studies)
    format: Literal["mooncake", "azure", "jsonl"]
    skip_bad_rows: bool = False
    start_s: float = Field(default=0.0, ge=0)
    end_s: float | None = Field(default=None, gt=0)
    max_requests: int | None = Field(default=None, gt=0)
    time_scale: float = Field(default=1.0, gt=0)
    rate: float | None = Field(default=None, gt=0)
    num_clients: int | None = Field(default=None, gt=0, le=MAX_CLIENTS)
    # Azure only: the synthetic shared prefix (see AzurePrefix).
    shared_prefix_tokens: int = Field(default=0, ge=0)
    shared_prefix_share: float = Field(default=0.0, ge=0, le=1)
    num_shared_prefixes: int = Field(default=1, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> TraceParams:
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end_s ({self.end_s}) must be after start_s ({self.start_s})")
        if self.rate is not None and self.time_scale != 1.0:
            raise ValueError("give rate or time_scale, not both")
        if self.num_clients is not None and (self.rate is not None or self.time_scale != 1.0):
            raise ValueError(
                "num_clients replays closed loop, ignoring timestamps; drop rate/time_scale"
            )
        if self.format != "azure" and (self.shared_prefix_tokens or self.shared_prefix_share):
            raise ValueError(
                "shared_prefix_* apply to format azure only; the other formats carry their own prefixes"
            )
        return self


@lru_cache(maxsize=4)
def _load_cached(
    path: str, resolved: str, mtime_ns: int, size: int, fmt: str, skip_bad_rows: bool
) -> Trace:
    return load_trace(path, fmt, skip_bad_rows)


def cached_trace(path: str, fmt: str, skip_bad_rows: bool = False) -> Trace:
    """load_trace, memoised on the file's identity so the arms of one study parse it once."""
    p = Path(path)
    if not p.is_file():
        return load_trace(p, fmt, skip_bad_rows)  # raises the one-line error
    st = p.stat()
    return _load_cached(str(path), str(p.resolve()), st.st_mtime_ns, st.st_size, fmt, skip_bad_rows)


def window(
    trace: Trace, start_s: float = 0.0, end_s: float | None = None, max_requests: int | None = None
) -> Trace:
    """Rows in [start_s, end_s), then the first max_requests; arrivals rebased to start_s."""
    t = trace.arrival_s
    keep = t >= start_s
    if end_s is not None:
        keep &= t < end_s
    rows = np.flatnonzero(keep)[:max_requests]
    return replace(trace.select(rows), arrival_s=trace.arrival_s[rows] - start_s)


def replay_times(
    arrival_s: np.ndarray, time_scale: float = 1.0, rate: float | None = None
) -> np.ndarray:
    """Open-loop arrival times: divided by time_scale, or rescaled to a mean rate of `rate` req/s."""
    if rate is None:
        return arrival_s / time_scale
    span = float(arrival_s[-1] - arrival_s[0]) if arrival_s.size > 1 else 0.0
    if span == 0.0:  # every row at one instant: spread nothing, the rate is undefined
        return arrival_s.copy()
    # Scale so the span lasts (n - 1) / rate seconds. Dividing by the span first keeps a tiny
    # (even subnormal) span finite, where (n - 1) / span would overflow.
    return (arrival_s / span) * ((arrival_s.size - 1) / rate)


class AzurePrefix:
    """Synthetic shared prefix for Azure rows (which carry lengths only).

    Row i (in file order after the window) draws u_i ~ U[0, 1) and k_i ~ U{0..K-1} from the
    workload's rng. If u_i < shared_prefix_share its prompt starts with the first
    min(S, ContextTokens - 1) tokens of shared prefix k_i (S = shared_prefix_tokens,
    K = num_shared_prefixes); the rest is random tokens. ContextTokens stays the prompt length.
    """

    def __init__(self, p: TraceParams, n: int, rng: np.random.Generator):
        self.tokens = p.shared_prefix_tokens
        shared = rng.random(n) < p.shared_prefix_share
        which = rng.integers(0, p.num_shared_prefixes, size=n)
        self.prefix_of_row = np.where(shared & (self.tokens > 0), which, -1)
        self.prefixes = [
            keyed_tokens(k, self.tokens, PREFIX_SALT) for k in range(p.num_shared_prefixes)
        ]

    def prompt(
        self, i: int, length: int, tokens: TokenStream
    ) -> tuple[Callable[[], np.ndarray], bool]:
        """Row i's prompt as what draws it when read (its random ids reserved now), and
        whether it starts with a shared prefix."""
        k = int(self.prefix_of_row[i])
        if k < 0:
            return partial(tokens.ids, tokens.reserve(length), length), False
        head = self.prefixes[k][: min(self.tokens, length - 1)]
        own = length - head.shape[0]
        return partial(_joined, head, tokens, tokens.reserve(own), own), True


def _joined(head: np.ndarray, tokens: TokenStream, start: int, n: int) -> np.ndarray:
    return np.concatenate([head, tokens.ids(start, n)])


def trace_requests(
    trace: Trace, arrivals: np.ndarray | None, rng: np.random.Generator, prefix: AzurePrefix | None
) -> Iterator[Request]:
    """Requests in trace order; each prompt is built only when the request is pulled, and
    random ids (rows that carry lengths only) only when it is read (`Request.draw_prompt`:
    drawn in chunks in the stream's order, the same ids, as nothing else draws from `rng`)."""
    tokens = TokenStream(rng)
    for i in range(len(trace)):
        length = int(trace.input_length[i])
        prompt, tag = trace.prompt(i), trace.format
        draw = None
        if prompt is None:
            if prefix:
                draw, shared = prefix.prompt(i, length, tokens)
            else:
                draw, shared = partial(tokens.ids, tokens.reserve(length), length), False
            prompt, tag = _UNDRAWN, "azure-shared" if shared else "azure"
        req = Request(
            request_id=int(trace.request_id[i]),
            prompt=prompt,
            output_tokens=int(trace.output_length[i]),
            arrival_s=None if arrivals is None else float(arrivals[i]),
            session_id=int(trace.session_id[i]),
            priority=int(trace.priority[i]),
            tag=tag,
            draw_prompt=draw,
            undrawn_tokens=length,
        )
        if draw is not None:
            del req.prompt  # drawn when first read (Request.__getattr__)
        yield req


def make_trace(p: TraceParams, rng: np.random.Generator) -> Workload:
    full = cached_trace(p.path, p.format, p.skip_bad_rows)
    trace = window(full, p.start_s, p.end_s, p.max_requests)
    if len(trace) == 0:
        raise ConfigError(
            f"workload.params: no rows of {p.path} in the window start_s={p.start_s}, end_s={p.end_s}"
        )
    arrivals = (
        None if p.num_clients is not None else replay_times(trace.arrival_s, p.time_scale, p.rate)
    )
    prefix = (
        AzurePrefix(p, len(trace), rng) if p.format == "azure" and p.shared_prefix_tokens else None
    )
    info = {
        **p.model_dump(),
        "records": len(trace),
        "skipped_rows": full.num_skipped,
        "replay_span_s": float(arrivals[-1]) if arrivals is not None else None,
    }
    labels = None
    if trace.request_label is not None:
        labels = dict(zip(trace.request_id.tolist(), trace.request_label.tolist(), strict=True))
    return Workload(
        "trace",
        trace_requests(trace, arrivals, rng, prefix),
        num_clients=p.num_clients,
        info=info,
        request_labels=labels,
    )
