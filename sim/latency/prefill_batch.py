"""A step's prefill chunks share one launch: priced by the kernel's work list, not chunk by chunk.

The calibration's prefill table is measured one chunk per launch, and a step is priced as the sum
of its chunks' table times. The engine runs every chunk of a step in one paged prefill launch
(kernels/paged_prefill: one program per query tile and KV head, keys split across programs only
while the tiles leave SMs idle). A chunk of 128 new tokens over 2K of context alone makes 32
programs on llama-3-8b's 8 KV heads, a quarter of the H200's 132 SMs, so the kernel splits its
keys to fill the rest; five such chunks in one launch fill it with no split. Measured on the H200
(`python -m engine.check --only prefill_batches`, one layer, the Gluon prefill kernel,
engine/runs/logs/2026-11-30_prefill_batches/prefill_batches_gluon.json): the steps with 2-9
chunks the round-5 engine runs served take 0.41-1.01x the sum of their chunks alone on the
llama-3-8b shard (median 0.51x) and 0.50-0.98x on the 70B TP 2 shard; the sum prices them +104%
and +30% (medians).

The model, per layer: the launch's work list as the kernel builds it (query tiles of `bq` tokens:
the tl.dot rows `block_m` over the padded GQA group, no more than the longest chunk needs; each
tile reads the cached context and its chunk's keys up to its last row) gives programs P and keys
read K (both over all KV heads). The kernel splits keys while P < pps * sms (pps: 2 programs per
SM for tiles under 64 rows, else 1). Then

    ms = a + k * K / sms / 1e3 + p * P / sms + (s if split else 0)

a launch overhead, keys streamed by all SMs, a cost per program, and an offset for a split
launch (its programs are shorter, plus a combine pass; fitted, it comes out negative). A term in
the longest program's keys fitted with a negative sign on both shards (collinear with K) and
judged no better on the served steps, so the model leaves it out. (a, k, p, s) are fitted
per attention shard by relative least squares to one-launch times of a grid of equal chunks and
of the grid's chunks alone (engine/runs/prefill_batches.py fit), judged on the served steps
(held out) and kept in the calibration file's `prefill_batches` entry. A step is never priced
below its costliest chunk alone (the table): adding a chunk to a launch does not make it
faster, and the grid starts at 32 new tokens, so the model alone underprices a launch of a few
tokens over a long context. A step with one chunk keeps the table's price. Not mirrored: a step
whose chunks are all one token long over many keys runs on the decode kernel (rare: decodes
are priced as decodes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

COEFFICIENTS = ("a", "k", "p", "s")


def pow2(n: int) -> int:
    """The next power of two >= n (n >= 1): a GQA group padded as the kernel pads it."""
    return 1 << (max(1, n) - 1).bit_length()


def work_list(
    new: Sequence[int], ctx: Sequence[int], group: int, kv_heads: int, block_m: int
) -> tuple[int, int, int]:
    """(programs, keys read, tile rows) of one unsplit launch over the chunks `new` tokens over
    `ctx` cached tokens (chunks with no new token skipped). The tiles' tl.dot rows are the
    kernel's (kernels/paged_prefill choose_block_q): block_m, or fewer when the longest chunk
    needs fewer, at least 16."""
    chunks = [(n, c) for n, c in zip(new, ctx, strict=True) if n > 0]
    rows = min(block_m, max(16, pow2(max((n for n, _ in chunks), default=1) * pow2(group))))
    bq = max(1, rows // pow2(group))
    programs = keys = 0
    for n, c in chunks:
        tiles = -(-n // bq)
        programs += tiles
        # tile j reads the context and its chunk's keys up to its last row: c + min(n, (j+1) bq)
        keys += tiles * c + bq * tiles * (tiles - 1) // 2 + n
    return programs * kv_heads, keys * kv_heads, rows


def split_target(rows: int, sms: int) -> int:
    """Programs below which the kernel splits keys: 2 per SM for tiles under 64 rows (short
    programs), else 1 (plan_prefill's default programs_per_sm)."""
    return (2 if rows < 64 else 1) * sms


def features(programs: int, keys: int, sms: int, target: int) -> tuple[float, ...]:
    """The model's terms, in COEFFICIENTS order; `target`: split_target of the launch."""
    return (1.0, keys / sms / 1e3, programs / sms, 0.0 if programs >= target else 1.0)


@dataclass(frozen=True, slots=True)
class PrefillBatch:
    """One attention shard's fitted launch model (ms per layer)."""

    coef: tuple[float, float, float, float]
    group: int  # query heads per KV head
    kv_heads: int
    block_m: int
    sms: int

    def ms(self, new: Sequence[int], ctx: Sequence[int]) -> float:
        """One layer's prefill attention of these chunks in one launch (the model alone)."""
        terms = launch_features(new, ctx, self.group, self.kv_heads, self.block_m, self.sms)
        return sum(c * t for c, t in zip(self.coef, terms, strict=True))


def launch_features(
    new: Sequence[int], ctx: Sequence[int], group: int, kv_heads: int, block_m: int, sms: int
) -> tuple[float, ...]:
    """`features` of one launch over these chunks."""
    programs, keys, rows = work_list(new, ctx, group, kv_heads, block_m)
    return features(programs, keys, sms, split_target(rows, sms))


# ([(new, context), ...] of one launch, measured ms)
BatchPoint = tuple[Sequence[tuple[int, int]], float]


def fit_prefill_batch(
    points: Sequence[BatchPoint], group: int, kv_heads: int, block_m: int, sms: int
) -> tuple[PrefillBatch, np.ndarray]:
    """The coefficients with the least squared relative error over `points`, and the relative
    errors (model / measured - 1)."""
    rows = []
    for chunks, _ in points:
        new, ctx = [n for n, _ in chunks], [c for _, c in chunks]
        rows.append(launch_features(new, ctx, group, kv_heads, block_m, sms))
    x = np.array(rows)
    y = np.array([ms for _, ms in points], dtype=np.float64)
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)
    model = PrefillBatch(tuple(float(v) for v in coef), group, kv_heads, block_m, sms)  # type: ignore[arg-type]
    return model, x @ coef / y - 1.0
