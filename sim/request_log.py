"""Every request a run dispatched, in dispatch order: the live ones as their `Sequence`, each one
that is over as a row of typed columns.

A finished request's `Sequence` and `Request`, with their boxed fields, took ~1.8 KB each; at
256 nodes x 600 s the ~117,000 of them held ~200 MB until the run ended. Its row here is ~30
values of 8 bytes. Reading the log gives back, for a row, a `FinishedSequence`: the same
attribute names and values its `Sequence` had when it was closed (`tests/sim/
test_request_log.py` compares every field with a run that keeps the objects).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple

from sim.sequence import Sequence, Status

# Sequence fields a row keeps (every one but the request, its token ids, keys, pages and events)
_FLOATS = ("arrival_s", "first_token_s", "finish_s", "routed_s", "scheduled_s", "last_read_s")
_INTS = (
    "prompt_tokens",
    "node",
    "num_computed",
    "num_generated",
    "recomputed_outputs",
    "cached_tokens",
    "stored_pages",
    "queued_step",
    "preemptions",
    "false_hits",
    "wrong_reuse_tokens",
    "use_after_free",
    "kv_tokens",
    "key_page_size",
    "key_hash_bits",
)
_FLAGS = ("cacheable", "oom_blocked")
_STATUSES = list(Status)


class RequestFields(NamedTuple):
    """What a finished sequence's `req` still answers (its token ids are gone with it)."""

    request_id: int
    output_tokens: int
    arrival_s: float | None
    session_id: int
    priority: int
    tag: str
    prompt_tokens: int


@dataclass(slots=True, frozen=True)
class FinishedSequence:
    """A closed row read back: a finished `Sequence`'s fields, by the same names."""

    req: RequestFields
    status: Status
    arrival_s: float
    first_token_s: float
    finish_s: float
    routed_s: float
    scheduled_s: float
    last_read_s: float
    prompt_tokens: int
    node: int
    num_computed: int
    num_generated: int
    recomputed_outputs: int
    cached_tokens: int
    stored_pages: int
    queued_step: int
    preemptions: int
    false_hits: int
    wrong_reuse_tokens: int
    use_after_free: int
    kv_tokens: int
    key_page_size: int
    key_hash_bits: int
    cacheable: bool
    oom_blocked: bool


class RequestLog:
    """A list of the run's requests (append, len, index, iterate) that lets go of each one's
    objects once `close` says it is over."""

    def __init__(self) -> None:
        self._live: dict[int, Sequence] = {}  # position -> a request not closed yet
        self._floats = [array("d") for _ in _FLOATS]
        self._ints = [array("q") for _ in _INTS]
        self._flags = [array("b") for _ in _FLAGS]
        self._status = array("b")
        self._request = [
            array("q") for _ in range(5)
        ]  # id, output tokens, session, priority, prompt
        self._request_arrival = array("d")  # NaN: none (closed loop)
        self._tag = array("l")  # into self._tags
        self._tags: list[str] = []
        self._tag_codes: dict[str, int] = {}
        self._num = 0
        self._position: dict[int, int] = {}  # id(sequence) -> position, while live

    def append(self, seq: Sequence) -> None:
        self._live[self._num] = seq
        self._position[id(seq)] = self._num
        self._num += 1
        for floats in (*self._floats, self._request_arrival):
            floats.append(0.0)
        for ints in (*self._ints, *self._flags, self._status, *self._request, self._tag):
            ints.append(0)

    def close(self, seq: Sequence) -> None:
        """`seq` is over (finished or failed for good): its fields go to its row."""
        at = self._position.pop(id(seq))
        del self._live[at]
        for floats, name in zip(self._floats, _FLOATS, strict=True):
            floats[at] = getattr(seq, name)
        for ints, name in zip((*self._ints, *self._flags), _INTS + _FLAGS, strict=True):
            ints[at] = getattr(seq, name)
        self._status[at] = _STATUSES.index(seq.status)
        req = seq.req
        values = (
            req.request_id,
            req.output_tokens,
            req.session_id,
            req.priority,
            req.prompt_tokens,
        )
        for column, value in zip(self._request, values, strict=True):
            column[at] = value
        self._request_arrival[at] = float("nan") if req.arrival_s is None else req.arrival_s
        self._tag[at] = self._tag_code(req.tag)

    def _tag_code(self, tag: str) -> int:
        code = self._tag_codes.get(tag)
        if code is None:
            code = self._tag_codes[tag] = len(self._tags)
            self._tags.append(tag)
        return code

    def __len__(self) -> int:
        return self._num

    def __getitem__(self, at: int) -> Sequence | FinishedSequence:
        if at < 0:
            at += self._num
        if not 0 <= at < self._num:
            raise IndexError("request log index out of range")
        live = self._live.get(at)
        return live if live is not None else self._row(at)

    def __iter__(self) -> Iterator[Sequence | FinishedSequence]:
        live = self._live
        for at in range(self._num):
            seq = live.get(at)
            yield seq if seq is not None else self._row(at)

    def values(self, path: str) -> Iterator:
        """`attrgetter(path)` of each request in turn (`"req.tag"`, `"status.value"`, a field's
        name), closed rows read from their column: no row object is built."""
        read, column = attrgetter(path), self._column(path)
        live = self._live
        for at in range(self._num):
            seq = live.get(at)
            yield read(seq) if seq is not None else column(at)

    def _column(self, path: str) -> Callable[[int], object]:
        if path in _FLOATS:
            return self._floats[_FLOATS.index(path)].__getitem__
        if path in _INTS:
            return self._ints[_INTS.index(path)].__getitem__
        if path == "req.request_id":
            return self._request[0].__getitem__
        if path == "req.tag":
            return lambda at: self._tags[self._tag[at]]
        if path == "status.value":
            return lambda at: _STATUSES[self._status[at]].value
        return lambda at: attrgetter(path)(self._row(at))

    def live(self) -> list[Sequence]:
        """The requests not closed, in dispatch order."""
        return [self._live[at] for at in sorted(self._live)]

    def _row(self, at: int) -> FinishedSequence:
        request_id, output_tokens, session_id, priority, prompt_tokens = (
            column[at] for column in self._request
        )
        arrival = self._request_arrival[at]
        req = RequestFields(
            request_id,
            output_tokens,
            None if arrival != arrival else arrival,  # NaN: none
            session_id,
            priority,
            self._tags[self._tag[at]],
            prompt_tokens,
        )
        fields: dict[str, Any] = {
            name: column[at] for name, column in zip(_FLOATS, self._floats, strict=True)
        }
        fields |= {name: column[at] for name, column in zip(_INTS, self._ints, strict=True)}
        fields |= {name: bool(c[at]) for name, c in zip(_FLAGS, self._flags, strict=True)}
        return FinishedSequence(req=req, status=_STATUSES[self._status[at]], **fields)
