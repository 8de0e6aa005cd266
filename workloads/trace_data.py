"""A loaded trace held as flat numpy columns, never as per-request token arrays.

Memory is proportional to the rows and their block ids (CSR offsets into one id array), not to the
prompt tokens: a prompt is built only when asked for (`prompt(i)`), from its block ids through
`tokens.block_tokens`, so equal ids give equal tokens at any page size. Rows given as explicit
token lists (our generic JSONL) keep those tokens in one flat int32 array.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from workloads.tokens import blocks_prompt

MOONCAKE_BLOCK_SIZE = 512  # tokens per hash id in the Mooncake FAST'25 traces


@dataclass(frozen=True)
class Trace:
    path: str
    format: str  # "mooncake" | "azure" | "jsonl"
    arrival_s: np.ndarray  # float64 [n]: seconds on the trace's own clock, non-decreasing
    input_length: np.ndarray  # int64 [n]: prompt tokens
    output_length: np.ndarray  # int64 [n]: tokens generated
    request_id: np.ndarray  # int64 [n]
    session_id: np.ndarray  # int64 [n]; -1 = none
    priority: np.ndarray  # int64 [n]
    block_size: int  # tokens per block id (0: the trace has no block rows)
    block_start: (
        np.ndarray
    )  # int64 [n + 1]: row i's ids are block_ids[block_start[i]:block_start[i+1]]
    block_ids: np.ndarray  # int64 [total blocks]
    token_start: np.ndarray  # int64 [n + 1]: row i's explicit tokens, same CSR layout
    tokens: np.ndarray  # int32 [total explicit tokens]
    num_skipped: int = 0  # bad rows skipped under skip_bad_rows
    skipped_errors: tuple[str, ...] = field(default=())  # the first few skip reasons
    # The ids as the file wrote them (object [n] of str) when any was text; request_id then
    # holds the row index. None: request_id holds the file's own integer ids.
    request_label: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def has_content(self) -> bool:
        """True if rows carry prefix information (block ids or tokens); Azure rows do not."""
        return bool(self.block_ids.size or self.tokens.size)

    def blocks(self, i: int) -> np.ndarray:
        return self.block_ids[self.block_start[i] : self.block_start[i + 1]]

    def prompt(self, i: int) -> np.ndarray | None:
        """int32 [input_length[i]] token ids of row i, or None if the row has no content."""
        if self.token_start[i + 1] > self.token_start[i]:
            return self.tokens[self.token_start[i] : self.token_start[i + 1]]
        if self.block_start[i + 1] > self.block_start[i]:
            return blocks_prompt(self.blocks(i), int(self.input_length[i]), self.block_size)
        return None

    def select(self, rows: np.ndarray) -> Trace:
        """The sub-trace of `rows` (sorted indices), keeping the CSR columns consistent."""
        b_start, b_ids = _take_csr(self.block_start, self.block_ids, rows)
        t_start, toks = _take_csr(self.token_start, self.tokens, rows)
        return Trace(
            path=self.path,
            format=self.format,
            arrival_s=self.arrival_s[rows],
            input_length=self.input_length[rows],
            output_length=self.output_length[rows],
            request_id=self.request_id[rows],
            session_id=self.session_id[rows],
            priority=self.priority[rows],
            block_size=self.block_size,
            block_start=b_start,
            block_ids=b_ids,
            token_start=t_start,
            tokens=toks,
            num_skipped=self.num_skipped,
            skipped_errors=self.skipped_errors,
            request_label=None if self.request_label is None else self.request_label[rows],
        )


def _take_csr(
    start: np.ndarray, values: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    lengths = start[rows + 1] - start[rows]
    new_start = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_start[1:])
    if not values.size or not rows.size:
        return new_start, values[:0]
    # Index of every kept value: each row's start repeated over its length plus 0..len-1.
    offsets = np.arange(new_start[-1]) - np.repeat(new_start[:-1], lengths)
    return new_start, values[np.repeat(start[rows], lengths) + offsets]


class TraceBuilder:
    """Collects validated rows (Python lists) and freezes them into a Trace."""

    def __init__(self, path: str, fmt: str):
        self.path, self.format = path, fmt
        self.arrival_s: list[float] = []
        self.input_length: list[int] = []
        self.output_length: list[int] = []
        self.request_id: list[int | str] = []
        self.session_id: list[int] = []
        self.priority: list[int] = []
        self.block_counts: list[int] = []
        self.block_ids: list[int] = []
        self.token_counts: list[int] = []
        self.tokens: list[int] = []
        self.block_size = 0
        self.num_skipped = 0
        self.skipped_errors: list[str] = []

    def add(
        self,
        arrival_s: float,
        input_length: int,
        output_length: int,
        *,
        request_id: int | str,
        blocks: Sequence[int] = (),
        tokens: Sequence[int] = (),
        session_id: int = -1,
        priority: int = 0,
    ) -> None:
        self.arrival_s.append(arrival_s)
        self.input_length.append(input_length)
        self.output_length.append(output_length)
        self.request_id.append(request_id)
        self.session_id.append(session_id)
        self.priority.append(priority)
        self.block_counts.append(len(blocks))
        self.block_ids.extend(blocks)
        self.token_counts.append(len(tokens))
        self.tokens.extend(tokens)

    def skip(self, reason: str) -> None:
        self.num_skipped += 1
        if len(self.skipped_errors) < 5:
            self.skipped_errors.append(reason)

    def build(self) -> Trace:
        def csr(counts: list[int]) -> np.ndarray:
            out = np.zeros(len(counts) + 1, dtype=np.int64)
            np.cumsum(counts, out=out[1:])
            return out

        labelled = any(isinstance(x, str) for x in self.request_id)
        trace = Trace(
            path=self.path,
            format=self.format,
            arrival_s=np.array(self.arrival_s, dtype=np.float64),
            input_length=np.array(self.input_length, dtype=np.int64),
            output_length=np.array(self.output_length, dtype=np.int64),
            request_id=(
                np.arange(len(self.request_id), dtype=np.int64)
                if labelled
                else np.array(self.request_id, dtype=np.int64)
            ),
            session_id=np.array(self.session_id, dtype=np.int64),
            priority=np.array(self.priority, dtype=np.int64),
            block_size=self.block_size,
            block_start=csr(self.block_counts),
            block_ids=np.array(self.block_ids, dtype=np.int64),
            token_start=csr(self.token_counts),
            tokens=np.array(self.tokens, dtype=np.int32),
            num_skipped=self.num_skipped,
            skipped_errors=tuple(self.skipped_errors),
            request_label=np.array([str(x) for x in self.request_id], dtype=object)
            if labelled
            else None,
        )
        for column in (
            trace.arrival_s,
            trace.input_length,
            trace.output_length,
            trace.block_ids,
            trace.block_start,
            trace.token_start,
            trace.tokens,
        ):
            column.flags.writeable = False  # shared between arms through the load cache
        return trace
