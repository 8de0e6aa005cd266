"""Page index codec: which pages of which remote node a transfer wants, in few bytes.

A cross-node read first sends the page index (which pages to read), then the data. A plain list
of 64-bit page ids costs 8 bytes a page: 80,000 pages = 640,000 bytes, far over one message. This
codec stores, per remote node, the wanted pages of each 4096-page chunk as a base offset plus a
bitmap of the range [base, last], falling back to runs or a delta list where that is smaller
(sparse or contiguous chunks). Decoding gives back exactly the set that was encoded.

Format (every integer an unsigned LEB128 varint unless marked as a byte):
  index     := MAGIC(byte) num_nodes node*                  nodes in increasing id order
  node      := node_id num_chunks chunk*                    chunks in increasing order
  chunk     := (chunk_gap << 2 | kind) container            chunk_gap: the first chunk's number,
                                                            then distance - 1 to the previous one
  Chunk c covers page ids [c * 4096, (c + 1) * 4096); offsets below are relative to c * 4096.
  BITMAP(0) := base nbits-1 bytes[ceil(nbits / 8)]          bit i (LSB first): page base + i
  RUNS(1)   := num_runs-1 (gap length-1)*                   first gap = start offset; later
                                                            gap = start - previous run end - 2
  LIST(2)   := count-1 first_offset (next - previous - 1)*
Each chunk takes its smallest container (ties: BITMAP, then RUNS, then LIST).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

MAGIC = 0xB1  # format version 1
CHUNK_BITS = 12  # 4096 page ids per chunk: every in-chunk offset fits a 2-byte varint
CHUNK_PAGES = 1 << CHUNK_BITS
MAX_PAGE_ID = (1 << 64) - 1
BITMAP, RUNS, LIST = 0, 1, 2
KIND_NAMES = ("bitmap", "runs", "list")

PageIndex = dict[int, list[int]]  # node id -> sorted distinct page ids on that node
_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


# -- sizes (vectorised; the simulator prices every handshake with these) ------------------------
def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of the LEB128 varint of each uint64 value (1 to 10)."""
    v = np.asarray(values, dtype=np.uint64).reshape(-1)
    return 1 + (v[:, None] >= _VARINT_LIMITS).sum(axis=1)


def varint_size(value: int) -> int:
    return max(1, -(-value.bit_length() // 7))


def _as_ids(pages: Iterable[int] | np.ndarray) -> np.ndarray:
    """Sorted distinct uint64 page ids; out-of-range ids are an error, never wrapped."""
    if isinstance(pages, np.ndarray) and pages.dtype.kind in "iu":
        if pages.size and (pages.dtype.kind == "i" and pages.min() < 0):
            raise ValueError("page ids must be >= 0")
        return np.unique(pages.astype(np.uint64))
    ints = [int(p) for p in pages]
    if any(p < 0 or p > MAX_PAGE_ID for p in ints):
        raise ValueError(f"page ids must be in [0, {MAX_PAGE_ID}]")
    return np.unique(np.array(ints, dtype=np.uint64))


def _chunk_plan(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per chunk of sorted ids: (chunk numbers, start index into ids, chosen kind, encoded bytes)."""
    chunk = ids >> np.uint64(CHUNK_BITS)
    off = (ids & np.uint64(CHUNK_PAGES - 1)).astype(np.int64)
    n = ids.shape[0]
    starts = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1]])
    ends = np.r_[starts[1:], n]  # exclusive
    counts = ends - starts
    lo, hi = off[starts], off[ends - 1]
    bitmap = varint_sizes(lo) + varint_sizes(hi - lo) + (hi - lo + 8) // 8
    step = np.r_[0, off[1:] - off[:-1] - 1]  # gap to the previous id, minus one
    step[starts] = off[starts]  # a chunk's first id is stored as its offset
    listed = varint_sizes(counts - 1) + np.add.reduceat(varint_sizes(step), starts)
    run_start = np.r_[True, step[1:] != 0]
    run_start[starts] = True
    r = np.flatnonzero(run_start)
    run_len = np.r_[r[1:], n] - r
    gap = np.where(np.isin(r, starts), off[r], off[r] - off[np.maximum(r - 1, 0)] - 2)
    first_run = np.searchsorted(r, starts)
    runs = varint_sizes(np.diff(np.r_[first_run, r.shape[0]]) - 1) + np.add.reduceat(
        varint_sizes(gap) + varint_sizes(run_len - 1), first_run
    )
    sizes = np.stack([bitmap, runs, listed])  # [3, num_chunks]
    kind = sizes.argmin(axis=0)  # argmin keeps the first minimum: the documented tie order
    chunk_no = chunk[starts]
    chunk_gap = np.r_[chunk_no[:1], chunk_no[1:] - chunk_no[:-1] - np.uint64(1)].astype(np.uint64)
    header = varint_sizes((chunk_gap << np.uint64(2)) | kind.astype(np.uint64))
    return chunk_no, starts, kind, header + sizes[kind, np.arange(kind.shape[0])]


def encoded_size(index: Mapping[int, Iterable[int] | np.ndarray]) -> int:
    """len(encode(index)), without building the bytes."""
    total = 1 + varint_size(len(index))
    for node, pages in index.items():
        ids = _as_ids(pages)
        total += varint_size(int(node))
        if ids.size == 0:
            total += 1
            continue
        _, _, _, chunk_bytes = _chunk_plan(ids)
        total += varint_size(chunk_bytes.shape[0]) + int(chunk_bytes.sum())
    return total


def kind_counts(pages: Iterable[int] | np.ndarray) -> dict[str, int]:
    """How many chunks of one node's pages take each container kind (for the size table)."""
    ids = _as_ids(pages)
    if ids.size == 0:
        return {name: 0 for name in KIND_NAMES}
    kind = _chunk_plan(ids)[2]
    return {name: int((kind == k).sum()) for k, name in enumerate(KIND_NAMES)}


def single_page_entry_bytes(node_id: int) -> int:
    """The largest possible index of one page (the largest id) on `node_id`: the least a message
    limit must hold, or no index could ever be sent."""
    return encoded_size({node_id: [MAX_PAGE_ID]})


# -- bytes ---------------------------------------------------------------------------------------
def _put(out: bytearray, value: int) -> None:
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def _put_chunk(out: bytearray, kind: int, offsets: list[int]) -> None:
    if kind == BITMAP:
        lo, nbits = offsets[0], offsets[-1] - offsets[0] + 1
        bits = np.zeros(nbits, dtype=np.uint8)
        bits[np.asarray(offsets) - lo] = 1
        _put(out, lo)
        _put(out, nbits - 1)
        out += np.packbits(bits, bitorder="little").tobytes()
    elif kind == RUNS:
        runs: list[list[int]] = []
        for o in offsets:
            if runs and o == runs[-1][1] + 1:
                runs[-1][1] = o
            else:
                runs.append([o, o])
        _put(out, len(runs) - 1)
        prev_end = None
        for start, end in runs:
            _put(out, start if prev_end is None else start - prev_end - 2)
            _put(out, end - start)
            prev_end = end
    else:
        _put(out, len(offsets) - 1)
        _put(out, offsets[0])
        for a, b in zip(offsets, offsets[1:], strict=False):
            _put(out, b - a - 1)


def encode(index: Mapping[int, Iterable[int] | np.ndarray]) -> bytes:
    out = bytearray([MAGIC])
    _put(out, len(index))
    for node in sorted(index):
        if int(node) < 0:
            raise ValueError("node ids must be >= 0")
        ids = _as_ids(index[node])
        _put(out, int(node))
        if ids.size == 0:
            _put(out, 0)
            continue
        chunk_no, starts, kind, _ = _chunk_plan(ids)
        _put(out, chunk_no.shape[0])
        offsets = (ids & np.uint64(CHUNK_PAGES - 1)).astype(np.int64).tolist()
        bounds = [*starts.tolist(), ids.shape[0]]
        prev = None
        for i, c in enumerate(chunk_no.tolist()):
            _put(out, ((c if prev is None else c - prev - 1) << 2) | int(kind[i]))
            _put_chunk(out, int(kind[i]), offsets[bounds[i] : bounds[i + 1]])
            prev = c
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def varint(self) -> int:
        value, shift = 0, 0
        while True:
            if self.pos >= len(self.data):
                raise ValueError("truncated page index")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("truncated page index")
        self.pos += n
        return self.data[self.pos - n : self.pos]


def _get_chunk(r: _Reader, kind: int) -> list[int]:
    if kind == BITMAP:
        lo, nbits = r.varint(), r.varint() + 1
        bits = np.unpackbits(
            np.frombuffer(r.take((nbits + 7) // 8), dtype=np.uint8), bitorder="little"
        )
        return (np.flatnonzero(bits[:nbits]) + lo).tolist()
    if kind == RUNS:
        offsets: list[int] = []
        prev_end = None
        for _ in range(r.varint() + 1):
            start = r.varint() + (0 if prev_end is None else prev_end + 2)
            prev_end = start + r.varint()
            offsets.extend(range(start, prev_end + 1))
        return offsets
    if kind == LIST:
        count = r.varint() + 1
        offsets = [r.varint()]
        for _ in range(count - 1):
            offsets.append(offsets[-1] + r.varint() + 1)
        return offsets
    raise ValueError(f"unknown chunk kind {kind}")


def decode(data: bytes) -> PageIndex:
    """The exact index `encode` was given: node -> sorted distinct page ids."""
    r = _Reader(data)
    if r.take(1)[0] != MAGIC:
        raise ValueError("not a page index (bad magic byte)")
    index: PageIndex = {}
    for _ in range(r.varint()):
        node = r.varint()
        pages: list[int] = []
        chunk = -1
        for _ in range(r.varint()):
            head = r.varint()
            chunk += (head >> 2) + 1
            base = chunk << CHUNK_BITS
            pages.extend(base + o for o in _get_chunk(r, head & 3))
        index[node] = pages
    if r.pos != len(data):
        raise ValueError("trailing bytes after the page index")
    return index


def normalize(index: Mapping[int, Iterable[int] | np.ndarray]) -> PageIndex:
    """The form `decode` returns: node -> sorted distinct Python ints."""
    return {int(node): [int(p) for p in _as_ids(pages)] for node, pages in sorted(index.items())}
