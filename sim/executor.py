"""Who says how long a step took: one Protocol, the latency model here, the GPU in engine/."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from sim.latency.base import LatencyModel, StepShape
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
    as `shape_time_s`). The memo is dropped whole past `max_entries` (memory stays bounded)."""

    def __init__(self, latency: LatencyModel, max_entries: int = 200_000):
        self.latency = latency
        self.max_entries = max_entries
        self._by_size: dict[int, dict[int, float]] = {}
        self._num_entries = 0
        self._vectorised = getattr(latency, "decode_steps_s", None)  # not every model has it

    def many(self, num_decode: int, ctx_sums: Sequence[int]) -> list[float]:
        """The price of each decode-only step of `num_decode` requests, one per context sum."""
        memo = self._by_size.get(num_decode)
        if memo is None:
            memo = self._by_size[num_decode] = {}
        prices = list(map(memo.get, ctx_sums))
        if None not in prices:
            return prices  # type: ignore[return-value]
        missing = [s for s, price in zip(ctx_sums, prices, strict=True) if price is None]
        if self._num_entries + len(missing) > self.max_entries:  # start afresh
            self._by_size = {num_decode: memo}
            memo.clear()
            self._num_entries = 0
            missing = list(ctx_sums)
        memo.update(zip(missing, self._price(num_decode, missing), strict=True))
        self._num_entries += len(missing)
        return [memo[s] for s in ctx_sums]

    def _price(self, num_decode: int, ctx_sums: list[int]) -> list[float]:
        many = self._vectorised
        if many is not None and len(ctx_sums) >= VECTOR_MIN:
            return many(num_decode, np.array(ctx_sums, dtype=np.int64)).tolist()
        price = self.latency.shape_time_s
        return [price(StepShape([], [], num_decode, s)) for s in ctx_sums]


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
        """The step's compute, as the latency model prices it."""
        return self.latency.shape_time_s(step.shape())

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
        step_s = self.latency.shape_time_s(StepShape([], [], len(step.items), decode_ctx_sum))
        if self.transfer is not None:
            step_s += self.transfer(node_id, step.items, now)
        return step_s
