"""Decodes that read the same KV pages in one launch: the re-reads come from L2.

After prefix hits, several decodes of a step read the same leading pages (the prefix index hands
every hit the same physical pages). The paged decode kernel still reads each sequence's whole
context, but a page that another program of the same launch reads too is mostly served by the
GPU's L2 cache, not by HBM. The calibration's decode table is measured on distinct pages, so it
over-prices such a step: on the H200, 64 decodes whose 2K-token prefixes are shared 4 ways run
in 0.70x the distinct-pages time (`python -m engine.check --only decode_shared_pages`, tables in
engine/runs/logs/2026-11-30_decode_shared_graph/: 5 prefixes x 6 batches with 128-384-token
tails, 4 prefixes x 5 batches with 2-4K-token tails, two attention shards).

The model, fitted to those tables (two parameters, residuals kept beside them): every byte goes
through L2, only the unique ones come from HBM, and the kernel runs at a soft maximum of the two
bandwidth bounds. A step's decode attention is priced at the decode table's time for the
effective context sum

    T_eff = T * norm(1 - d, rho) / norm(1, rho),   norm(a, b) = (a^p + b^p)^(1/p)

where T is the decodes' context sum and d the share of it that a decode reads while another
decode of the step reads it too. d = 0 gives T (the table as measured); as d grows the time
falls towards rho, the time per byte through L2 relative to HBM. rho and p are fitted
(`fit_shared_reads`, run by engine/runs/fit_shared_reads.py) and kept in the calibration file's
`decode_shared_reads`. (A third term, reuse fading as the sharing decodes' own tails grow, was
tried: the 6-10K-token tails still save as much, and the fit set it to zero.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

RHO_GRID = np.round(np.arange(0.30, 0.901, 0.01), 2)
P_GRID = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0)


@dataclass(frozen=True, slots=True)
class SharedReads:
    """rho: L2 time per byte relative to HBM's; p: how sharply the two bounds meet."""

    rho: float
    p: float

    def effective_tokens(self, total: float, shared: int) -> float:
        """The context sum a distinct-pages decode would read in the same time."""
        if shared <= 0 or total <= 0:
            return float(total)
        d = min(shared / total, 1.0)
        p, rho = self.p, self.rho
        return total * ((1.0 - d) ** p + rho**p) ** (1.0 / p) / (1.0 + rho**p) ** (1.0 / p)


# (batch, context sum, shared tokens, measured time / distinct-pages time)
SharedPoint = tuple[int, int, int, float]
# decode attention time (any unit) of `batch` decodes of mean context `ctx`
DecodeTime = Callable[[int, float], float]


def predicted_ratios(model: SharedReads, points: Sequence[SharedPoint], price: DecodeTime):
    """The model's time / distinct-pages time for every point."""
    return np.array(
        [
            price(b, model.effective_tokens(total, shared) / b) / price(b, total / b)
            for b, total, shared, _ in points
        ]
    )


def fit_shared_reads(
    tables: Sequence[tuple[Sequence[SharedPoint], DecodeTime]],
) -> tuple[SharedReads, list[np.ndarray]]:
    """(rho, p) on the grids with the least mean absolute error of the predicted ratios against
    the measured ones over all tables (each: its points and the decode time they are priced
    from), and the fitted model's signed errors per table and point."""

    def errors(model: SharedReads) -> list[np.ndarray]:
        return [
            predicted_ratios(model, points, price) - np.array([r for *_, r in points])
            for points, price in tables
        ]

    best: tuple[float, SharedReads] | None = None
    for p in P_GRID:
        for rho in RHO_GRID:
            model = SharedReads(float(rho), p)
            err = float(np.abs(np.concatenate(errors(model))).mean())
            if best is None or err < best[0]:
                best = (err, model)
    assert best is not None
    return best[1], errors(best[1])
