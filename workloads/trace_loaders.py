"""Trace loaders: Mooncake JSONL, Azure LLM inference CSV, and our generic JSONL.

Every row is validated with pydantic. A bad row raises ConfigError naming the file, the line and
the field ("trace.jsonl:7: input_length: Input should be greater than 0"); with skip_bad_rows it is
skipped and counted instead. Arrival times must not decrease (open-loop replay depends on it).
The row models and the JSONL schema are documented in docs/workloads.md.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.config import ConfigError
from workloads.trace_data import MOONCAKE_BLOCK_SIZE, Trace, TraceBuilder

FORMATS = ("mooncake", "azure", "jsonl")
BlockId = Annotated[int, Field(ge=0)]
TokenId = Annotated[int, Field(ge=0, lt=2**31)]
# A trace's own request id: a non-negative int64, or text ("req-1"; kept as text in requests.csv).
RequestId = (
    Annotated[int, Field(ge=0, lt=2**63)] | Annotated[str, Field(min_length=1, max_length=256)]
)


class RowError(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class MooncakeRow(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)
    timestamp: float = Field(ge=0)  # ms since the trace start
    input_length: int = Field(gt=0)
    output_length: int = Field(gt=0)
    hash_ids: list[BlockId]


class AzureRow(BaseModel):
    model_config = ConfigDict(extra="ignore")  # CSV cells are strings: lax parsing to int
    TIMESTAMP: str
    ContextTokens: int = Field(gt=0)
    GeneratedTokens: int = Field(gt=0)


class JsonlRow(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
    request_id: RequestId | None = None
    arrival_s: float = Field(ge=0)
    prompt_tokens: list[TokenId] | None = None
    block_ids: list[BlockId] | None = None
    block_size: int | None = Field(default=None, gt=0)
    input_length: int | None = Field(default=None, gt=0)
    output_tokens: int = Field(gt=0)
    session_id: int = Field(default=-1, ge=-1)
    priority: int = 0


def _blocks_needed(input_length: int, block_size: int) -> int:
    return -(-input_length // block_size)


def _check_hash_length(num_ids: int, input_length: int, block_size: int, field: str) -> None:
    need = _blocks_needed(input_length, block_size)
    if num_ids != need:
        raise RowError(
            field,
            f"has {num_ids} ids but input_length {input_length} needs "
            f"ceil({input_length}/{block_size}) = {need}",
        )


Row = TypeVar("Row", bound=BaseModel)


def _validate(model: type[Row], data: str | dict) -> Row:
    try:
        return (
            model.model_validate_json(data) if isinstance(data, str) else model.model_validate(data)
        )
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "row"
        raise RowError(loc, first["msg"]) from None


@dataclass(slots=True)
class ParsedRow:
    arrival_s: float | Decimal  # on the file's clock (Azure: exact seconds since year 1, rebased)
    time_field: str  # the column named in an out-of-order error
    input_length: int
    output_length: int
    request_id: int | str | None = None  # None: the row's index among the kept rows
    blocks: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    block_size: int = 0  # tokens per id in `blocks`
    session_id: int = -1
    priority: int = 0


# -- readers yield (line number, raw row); parsers turn a raw row into a ParsedRow or raise ------
def _jsonl_lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8-sig") as f:  # a byte-order mark is not part of row 1
        for number, line in enumerate(f, start=1):
            if line.strip():
                yield number, line


def _csv_rows(path: Path) -> Iterator[tuple[int, dict]]:
    with path.open(newline="", encoding="utf-8-sig") as f:  # Excel writes a byte-order mark
        reader = csv.DictReader(f)
        missing = [c for c in AzureRow.model_fields if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(
                f"{path}:1: header: missing column(s) {', '.join(missing)}; "
                f"expected {', '.join(AzureRow.model_fields)}"
            )
        for cells in reader:
            yield reader.line_num, cells


def _parse_mooncake(line: str, block_size: int) -> ParsedRow:
    row = _validate(MooncakeRow, line)
    _check_hash_length(len(row.hash_ids), row.input_length, MOONCAKE_BLOCK_SIZE, "hash_ids")
    return ParsedRow(
        row.timestamp / 1e3,
        "timestamp",
        row.input_length,
        row.output_length,
        blocks=row.hash_ids,
        block_size=MOONCAKE_BLOCK_SIZE,
    )


_AZURE_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2}(?:\.\d+)?)$")


def _azure_seconds(stamp: str) -> Decimal:
    """Seconds since 0001-01-01 of a 'YYYY-MM-DD HH:MM:SS.fffffff' stamp, exact (a float would
    keep only ~10 us of the 7 fraction digits at this magnitude)."""
    m = _AZURE_TIME.match(stamp.strip())
    if m is None:
        raise RowError("TIMESTAMP", f"{stamp!r} is not 'YYYY-MM-DD HH:MM:SS.fffffff'")
    y, mo, d, hh, mm = (int(x) for x in m.groups()[:5])
    try:
        day = date(y, mo, d).toordinal()
    except ValueError as err:
        raise RowError("TIMESTAMP", f"{stamp!r}: {err}") from None
    seconds = Decimal(m.group(6))
    if hh > 23 or mm > 59 or seconds >= 60:
        raise RowError("TIMESTAMP", f"{stamp!r}: time of day out of range")
    return day * 86400 + hh * 3600 + mm * 60 + seconds


def _parse_azure(cells: dict, block_size: int) -> ParsedRow:
    row = _validate(AzureRow, cells)
    return ParsedRow(
        _azure_seconds(row.TIMESTAMP), "TIMESTAMP", row.ContextTokens, row.GeneratedTokens
    )


def _parse_jsonl(line: str, block_size: int) -> ParsedRow:
    row = _validate(JsonlRow, line)
    out = ParsedRow(
        row.arrival_s,
        "arrival_s",
        0,
        row.output_tokens,
        request_id=row.request_id,
        session_id=row.session_id,
        priority=row.priority,
    )
    if (row.prompt_tokens is None) == (row.block_ids is None):
        raise RowError(
            "prompt_tokens", "give either prompt_tokens or block_ids (+ block_size, input_length)"
        )
    if row.prompt_tokens is not None:
        if not row.prompt_tokens:
            raise RowError("prompt_tokens", "must not be empty")
        if row.input_length is not None and row.input_length != len(row.prompt_tokens):
            raise RowError(
                "input_length", f"{row.input_length} != len(prompt_tokens) {len(row.prompt_tokens)}"
            )
        out.input_length, out.tokens = len(row.prompt_tokens), row.prompt_tokens
        return out
    assert row.block_ids is not None  # exactly one of prompt_tokens / block_ids (checked above)
    if row.block_size is None or row.input_length is None:
        raise RowError(
            "block_size" if row.block_size is None else "input_length", "required with block_ids"
        )
    if block_size and row.block_size != block_size:
        raise RowError(
            "block_size",
            f"{row.block_size} differs from {block_size} earlier in the file; "
            "one block size per file",
        )
    _check_hash_length(len(row.block_ids), row.input_length, row.block_size, "block_ids")
    out.input_length, out.blocks, out.block_size = row.input_length, row.block_ids, row.block_size
    return out


Reader = Callable[[Path], Iterator[tuple[int, Any]]]
Parser = Callable[[Any, int], ParsedRow]  # (raw row from the reader, block size so far) -> row
_READERS: dict[str, tuple[Reader, Parser]] = {
    "mooncake": (_jsonl_lines, _parse_mooncake),
    "azure": (_csv_rows, _parse_azure),
    "jsonl": (_jsonl_lines, _parse_jsonl),
}


def _elapsed_s(start: float | Decimal, end: float | Decimal) -> float:
    """end - start on one file's clock: both Decimal (Azure) or both float."""
    if isinstance(start, Decimal) or isinstance(end, Decimal):
        assert isinstance(start, Decimal) and isinstance(end, Decimal)
        return float(end - start)
    return float(end - start)


class _Loader:
    """Feeds parsed rows into a TraceBuilder, enforcing arrival order and unique request ids."""

    def __init__(self, path: Path, fmt: str):
        self.b = TraceBuilder(str(path), fmt)
        # Azure stamps are absolute: rebase to row 1
        self.origin: float | Decimal | None = None if fmt == "azure" else 0.0
        self.last_t = 0.0
        self.id_line: dict[str, int] = {}  # an id as written -> its line

    def add(self, number: int, row: ParsedRow) -> None:
        t = _elapsed_s(row.arrival_s if self.origin is None else self.origin, row.arrival_s)
        if t < self.last_t:
            raise RowError(
                row.time_field,
                f"arrival goes back in time ({t:g} s after {self.last_t:g} s); "
                "rows must be in arrival order",
            )
        rid = len(self.b.arrival_s) if row.request_id is None else row.request_id
        if str(rid) in self.id_line:
            raise RowError("request_id", f"{rid!r} already used at line {self.id_line[str(rid)]}")
        if self.origin is None:
            self.origin = row.arrival_s
        if row.blocks:
            self.b.block_size = row.block_size
        self.id_line[str(rid)] = number
        self.last_t = t
        self.b.add(
            t,
            row.input_length,
            row.output_length,
            request_id=rid,
            blocks=row.blocks,
            tokens=row.tokens,
            session_id=row.session_id,
            priority=row.priority,
        )


def load_trace(path: str | Path, fmt: str, skip_bad_rows: bool = False) -> Trace:
    """Read and validate a whole trace file; see the module docstring for the error rules."""
    path = Path(path)
    if fmt not in _READERS:
        raise ConfigError(f"format: unknown trace format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if not path.is_file():
        raise ConfigError(f"path: no such trace file {path}")
    read, parse = _READERS[fmt]
    loader = _Loader(path, fmt)
    try:
        for number, raw in read(path):
            try:
                loader.add(number, parse(raw, loader.b.block_size))
            except RowError as err:
                where = f"{path}:{number}: {err}"
                if not skip_bad_rows:
                    raise ConfigError(
                        where + " (skip_bad_rows skips and counts bad rows)"
                    ) from None
                loader.b.skip(where)
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a text file ({err.reason})") from None
    b = loader.b
    if not b.arrival_s:
        raise ConfigError(
            f"{path}: no valid rows" + (f" ({b.num_skipped} skipped)" if b.num_skipped else "")
        )
    return b.build()


def detect_format(path: str | Path) -> str:
    """Guess the format: .csv is Azure; JSONL with `hash_ids` is Mooncake, else our generic JSONL."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        return "azure"
    if not path.is_file():
        raise ConfigError(f"path: no such trace file {path}")
    with path.open(encoding="utf-8-sig", errors="replace") as f:  # binary: load_trace says so
        for line in f:
            if line.strip():
                return "mooncake" if '"hash_ids"' in line else "jsonl"
    raise ConfigError(f"{path}: empty trace file")
