"""A step's prefill chunks share one launch: priced by the kernel's work list, not chunk by chunk.

The calibration's prefill table is measured one chunk per launch, and a step is priced as the sum
of its chunks' table times. The engine runs every chunk of a step in one paged prefill launch
(kernels/paged_prefill: one program per query tile and KV head, keys split across programs only
while the tiles leave SMs idle). A chunk of 128 new tokens over 2K of context alone fills a
quarter of the H200's SMs, so the kernel splits its keys to fill the rest; four such chunks in one
launch fill it with no split. Measured on the H200 (`python -m engine.check --only
prefill_batches`, one layer, engine/runs/logs/2026-11-30_prefill_batches/): the steps with 2-9
chunks the engine runs served take 0.13-1.03x the sum of their chunks alone, median 0.52x on the
llama-3-8b shard; the sum prices them at +93% (median).

The model, per layer: the launch's work list as the kernel builds it (query tiles of `bq` tokens:
the tl.dot rows `block_m` over the padded GQA group, no more than the longest chunk needs; each
tile reads the cached context and its chunk's keys up to its last row) gives programs P and keys
read K (both over all KV heads), and the longest program's keys L. Then

    ms = a + k * K / sms / 1e3 + p * P / sms + (l * L / 1e3 if P >= sms else s)

a launch overhead, keys streamed by all SMs, a cost per program, and either the longest
program's tail (the tiles fill the SMs: no split) or the split launch's extra (combine pass).
(a, k, p, l, s) are fitted per attention shard by relative least squares to one-launch times of
a grid of equal chunks and of single chunks (engine/runs/prefill_batches.py fit), judged on the
served steps (held out) and kept in the calibration file's `prefill_batches` entry. A step with
one chunk keeps the table's price.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

COEFFICIENTS = ("a", "k", "p", "l", "s")


def _pow2(n: int) -> int:
    """The next power of two >= n (n >= 1)."""
    return 1 << (max(1, n) - 1).bit_length()


def work_list(
    new: Sequence[int], ctx: Sequence[int], group: int, kv_heads: int, block_m: int
) -> tuple[int, int, int]:
    """(programs, keys read, longest program's keys) of one launch over the chunks `new` tokens
    over `ctx` cached tokens (chunks with no new token skipped), unsplit."""
    chunks = [(n, c) for n, c in zip(new, ctx, strict=True) if n > 0]
    if not chunks:
        return 0, 0, 0
    gp = _pow2(group)
    rows = min(block_m, max(16, _pow2(max(n for n, _ in chunks) * gp)))
    bq = max(1, rows // gp)
    programs = keys = 0
    for n, c in chunks:
        tiles = -(-n // bq)
        programs += tiles
        # tile j reads the context and its chunk's keys up to its last row: c + min(n, (j+1) bq)
        keys += tiles * c + bq * tiles * (tiles - 1) // 2 + n
    longest = max(n + c for n, c in chunks)
    return programs * kv_heads, keys * kv_heads, longest


def features(programs: int, keys: int, longest: int, sms: int) -> tuple[float, ...]:
    """The model's terms, in COEFFICIENTS order."""
    full = programs >= sms
    return (
        1.0,
        keys / sms / 1e3,
        programs / sms,
        longest / 1e3 if full else 0.0,
        0.0 if full else 1.0,
    )


@dataclass(frozen=True, slots=True)
class PrefillBatch:
    """One attention shard's fitted launch model (ms per layer)."""

    coef: tuple[float, float, float, float, float]
    group: int  # query heads per KV head
    kv_heads: int
    block_m: int
    sms: int

    def ms(self, new: Sequence[int], ctx: Sequence[int]) -> float:
        """One layer's prefill attention of these chunks in one launch."""
        terms = features(*work_list(new, ctx, self.group, self.kv_heads, self.block_m), self.sms)
        return sum(c * t for c, t in zip(self.coef, terms, strict=True))


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
        rows.append(features(*work_list(new, ctx, group, kv_heads, block_m), sms))
    x = np.array(rows)
    y = np.array([ms for _, ms in points], dtype=np.float64)
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)
    model = PrefillBatch(tuple(float(v) for v in coef), group, kv_heads, block_m, sms)  # type: ignore[arg-type]
    return model, x @ coef / y - 1.0
