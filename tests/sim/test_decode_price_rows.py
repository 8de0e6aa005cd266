"""DecodePrices keeps its memo in rows of BLOCK quotients per (batch size, residue): spans that
cross rows, start mid-row, or arrive after a reset get the model's own floats."""

from __future__ import annotations

from sim.config import parse_config
from sim.executor import DecodePrices
from sim.latency import StepShape, make_latency_model

CFG = parse_config({"model": "llama-3-8b", "gpu": "h200", "node": {"num_gpus": 1, "tp": 1}})
LAT = make_latency_model(CFG.model, CFG.gpu, 1)


def own(size: int, sums) -> list[float]:
    return [LAT.shape_time_s(StepShape([], [], size, s)) for s in sums]


def test_a_span_across_rows_and_residues():
    prices = DecodePrices(LAT)
    block = DecodePrices.BLOCK
    for size, first, steps in [
        (3, 3 * (block - 5) + 2, 40),
        (3, 3 * (block - 5) + 1, 3 * block),
        (1, 0, 7),
    ]:
        sums = range(first, first + size * steps, size)
        assert prices.many(size, sums) == own(size, sums)
    assert prices.many(3, [7, 9, 700]) == own(3, [7, 9, 700])  # not a span: price by price


def test_partly_priced_rows_and_a_reset():
    prices = DecodePrices(LAT, max_entries=30)
    block = DecodePrices.BLOCK
    for first, steps in [
        (5 * block, 10),
        (5 * (block - 2), 20),
        (5 * 3 * block, 25),
        (5 * block, 40),
    ]:
        sums = range(first, first + 5 * steps, 5)
        assert prices.many(5, sums) == own(5, sums)
