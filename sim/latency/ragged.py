"""Decode batches of unequal contexts cost more than the equal-length table at their mean.

The calibration's decode table is measured on batches whose sequences all have the same
context, and a step is priced at its decodes' mean context. A serving batch is ragged: a 30K
context beside 2K ones. The kernel picks one split length for the whole batch (from its total
and its longest context) and its programs end unevenly, so a ragged batch takes longer than an
equal one with the same tokens: on the H200, up to 12% on one layer of the llama-3-8b shard and 17% on the 70B TP 2
shard (`python -m engine.check --only decode_ragged`: batches of 8-64 with lognormal lengths at a
2K or 8K mean, against equal lengths; engine/runs/logs/2026-11-30_run4/tables/decode_ragged.json).
The model has no batch-size term (wave quantisation makes some batch sizes cost more): 2.6% mean
and 10.7% worst error over the 78 batches fitted.

The model, fitted to that table (three parameters, residuals kept beside them): the step's
decode attention costs the table's time times

    1 + a * (1 - exp(-(max / mean - 1) / b)) * (ref_ctx / mean)^e

the penalty grows with the longest context over the mean and saturates (one long sequence
already sets the split), and is larger for short contexts (fewer waves to even it out). a, b
and e are fitted (`fit_ragged_decode`, run by engine/runs/fit_shared_reads.py) and kept in the
calibration file's `decode_ragged` entry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

REF_CTX = 2048
A_GRID = np.round(np.arange(0.0, 0.2001, 0.005), 3)
B_GRID = (0.1, 0.25, 0.5, 1.0, 2.0)
E_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True, slots=True)
class RaggedDecode:
    """a: the saturated penalty at ref_ctx; b: how fast it saturates in max / mean - 1;
    e: how it shrinks with the mean context."""

    a: float
    b: float
    e: float
    ref_ctx: int = REF_CTX

    def factor(self, mean_ctx: float, max_ctx: int) -> float:
        """The batch's time over the equal-length table's at its mean."""
        if mean_ctx <= 0 or max_ctx <= mean_ctx:
            return 1.0
        spread = 1.0 - math.exp(-(max_ctx / mean_ctx - 1.0) / self.b)
        return 1.0 + self.a * spread * (self.ref_ctx / mean_ctx) ** self.e


# (mean context, longest context, measured time / equal-length time)
RaggedPoint = tuple[float, int, float]


def fit_ragged_decode(points: Sequence[RaggedPoint]) -> tuple[RaggedDecode, np.ndarray]:
    """(a, b, e) on the grids with the least mean absolute error, and its signed errors."""
    measured = np.array([r for *_, r in points])

    def errors(model: RaggedDecode) -> np.ndarray:
        return np.array([model.factor(m, x) for m, x, _ in points]) - measured

    best: tuple[float, RaggedDecode] | None = None
    for e in E_GRID:
        for b in B_GRID:
            for a in A_GRID:
                model = RaggedDecode(float(a), b, e)
                err = float(np.abs(errors(model)).mean())
                if best is None or err < best[0]:
                    best = (err, model)
    assert best is not None
    return best[1], errors(best[1])
