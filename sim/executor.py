"""Who says how long a step took: one Protocol, the latency model here, the GPU in engine/."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Protocol

import numpy as np

from sim.latency.base import LatencyModel, StepShape
from sim.native import mypyc_attr
from sim.scheduler import BatchItem, Step

# Seconds a node's step waits for KV pages held by other nodes (sim/xnode/page_traffic.py).
RemoteTransfer = Callable[[int, list[BatchItem], float], float]
# Fewer decode steps than this are priced one by one (a numpy pass costs more than a few prices).
VECTOR_MIN = 6


class StepExecutor(Protocol):
    def run_step(self, node_id: int, step: Step, now: float) -> float:
        """Execute (or price) `step` starting at `now`; returns its duration in seconds."""
        ...


class DecodePrices:
    """Prices of decode-only steps by (batch size, context sum), memoised: a decode span prices
    the sums of a batch that grows by one token per request per step, and the same pairs recur
    from span to span and node to node (95% of them on the Vidur case). Each price is the
    latency model's own float (its vectorised `decode_steps_s` when it has one: the same floats
    as `shape_time_s`). The memo is dropped whole past `max_entries` (memory stays bounded).

    A span's sums are s, s + n, s + 2n, ... for n requests: they share the residue s mod n, so
    the memo keeps rows of BLOCK consecutive quotients per (n, residue) and a span reads its
    prices as one or two list slices (None where not priced yet)."""

    BLOCK: Final = 256

    def __init__(self, latency: LatencyModel, max_entries: int = 200_000):
        self.latency = latency
        self.max_entries = max_entries
        # (num_decode, ctx_sum % num_decode, ctx_sum // num_decode // BLOCK) -> BLOCK prices
        self._rows: dict[tuple[int, int, int], list[float | None]] = {}
        self._num_entries = 0
        self._vectorised = getattr(latency, "decode_steps_s", None)  # not every model has it

    def many(self, num_decode: int, ctx_sums: Sequence[int]) -> list[float]:
        """The price of each decode-only step of `num_decode` requests, one per context sum."""
        if isinstance(ctx_sums, range) and ctx_sums.step == num_decode and num_decode > 0:
            return self.span(num_decode, ctx_sums.start, len(ctx_sums))
        return [self.span(num_decode, s, 1)[0] for s in ctx_sums]

    def one(self, num_decode: int, ctx_sum: int) -> float:
        """The price of one decode-only step (`many(num_decode, [ctx_sum])[0]`): read from
        the memo where a span priced it, else priced alone (kept in a row that exists; a
        single step starts no row: rows are priced whole when asked again, for spans)."""
        row_at, at = divmod(ctx_sum // num_decode, self.BLOCK)
        row = self._rows.get((num_decode, ctx_sum % num_decode, row_at))
        if row is not None and row[at] is not None:
            return row[at]  # type: ignore[return-value]
        price = self._price(num_decode, [ctx_sum])[0]
        if row is not None:
            row[at] = price
            self._num_entries += 1
        return price

    def span(self, num_decode: int, first: int, count: int) -> list[float]:
        """`many(num_decode, range(first, first + count * num_decode, num_decode))`."""
        residue, quotient = first % num_decode, first // num_decode
        block = self.BLOCK
        row_at, start = divmod(quotient, block)
        key = (num_decode, residue, row_at)
        row = self._rows.get(key)
        if row is not None and start + count <= block:  # the usual case: one slice, all priced
            prices = row[start : start + count]
            if None not in prices:
                return prices  # type: ignore[return-value]
        out: list[float] = []
        while count:
            take = min(count, block - start)
            out += self._row_part(key, start, take)
            count -= take
            row_at, start = row_at + 1, 0
            key = (num_decode, residue, row_at)
        return out

    def _row_part(self, key: tuple[int, int, int], start: int, count: int) -> list[float]:
        """Prices start .. start + count - 1 of one row, pricing the missing ones."""
        row = self._rows.get(key)
        again = row is not None  # a row asked again is priced whole (one vectorised pass)
        if row is None:
            if (  # start afresh (a row holds BLOCK slots, priced or not)
                self._num_entries + count > self.max_entries
                or len(self._rows) * self.BLOCK > 8 * self.max_entries
            ):
                self._rows.clear()
                self._num_entries = 0
            row = self._rows[key] = [None] * self.BLOCK
        prices = row[start : start + count]
        if None not in prices:
            return prices  # type: ignore[return-value]
        num_decode, residue, row_at = key
        base = (row_at * self.BLOCK) * num_decode + residue
        if again and self._vectorised is not None:
            missing = [j for j, price in enumerate(row) if price is None]
        else:
            missing = [start + i for i, price in enumerate(prices) if price is None]
        sums = [base + j * num_decode for j in missing]
        for j, price in zip(missing, self._price(num_decode, sums), strict=True):
            row[j] = price
        self._num_entries += len(missing)
        return row[start : start + count]  # type: ignore[return-value]

    def _price(self, num_decode: int, ctx_sums: list[int]) -> list[float]:
        many = self._vectorised
        if many is not None and len(ctx_sums) >= VECTOR_MIN:
            return many(num_decode, np.array(ctx_sums, dtype=np.int64)).tolist()
        price = self.latency.shape_time_s
        return [price(StepShape([], [], num_decode, s)) for s in ctx_sums]


@mypyc_attr(allow_interpreted_subclasses=True)  # sim/cascade.py
class ModelledExecutor:
    """Simulation: the latency model prices the step; remote pages add their transfer time.
    `decode_prices` may be shared by the nodes of a cluster (one latency model)."""

    def __init__(
        self,
        latency: LatencyModel,
        transfer: RemoteTransfer | None = None,
        decode_prices: DecodePrices | None = None,
    ):
        self.latency = latency
        self.transfer = transfer
        self.decode_prices = decode_prices or DecodePrices(latency)

    def run_step(self, node_id: int, step: Step, now: float) -> float:
        step_s = self.compute_s(step)
        if self.transfer is not None:  # pages on other nodes arrive before the step reads them
            step_s += self.transfer(node_id, step.items, now)
        return step_s

    def compute_s(self, step: Step) -> float:
        """The step's compute, as the latency model prices it (a decode-only step from the
        memo: the same float, most are priced already by the spans of the same batch sizes)."""
        shape = step.shape()
        if shape.num_decode and not shape.prefill_new:
            return self.decode_prices.one(shape.num_decode, shape.decode_ctx_sum)
        return self.latency.shape_time_s(shape)

    def prices_decode_by_sum(self) -> bool:
        """Does a decode-only step's price depend on its size and context sum alone (not on
        the block tables, nor on other nodes' pages)?"""
        return self.transfer is None

    def decode_span_prices(self, step: Step, ctx_sums: Sequence[int]) -> list[float] | None:
        """`run_step` of the decode-only steps a decode span runs after `step` (the same
        requests, decoding on), one per context sum (memoised, the same floats); None when this
        executor cannot price them from their sums (the node then runs them one by one)."""
        if not self.prices_decode_by_sum():
            return None
        return self.decode_prices.many(len(step.items), ctx_sums)

    def decode_step_s(self, node_id: int, step: Step, decode_ctx_sum: int, now: float) -> float:
        """`run_step` of a decode-only step whose contexts sum to `decode_ctx_sum` (the node
        keeps the sum as its batch repeats): the same shape, priced without walking the batch."""
        step_s = self.decode_prices.one(len(step.items), decode_ctx_sum)
        if self.transfer is not None:
            step_s += self.transfer(node_id, step.items, now)
        return step_s
