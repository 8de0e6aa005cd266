"""Who says how long a step took: one Protocol, the latency model here, the GPU in engine/."""

from __future__ import annotations

from collections.abc import Callable
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


class ModelledExecutor:
    """Simulation: the latency model prices the step; remote pages add their transfer time."""

    def __init__(self, latency: LatencyModel, transfer: RemoteTransfer | None = None):
        self.latency = latency
        self.transfer = transfer

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

    def decode_steps_s(self, num_decode: int, ctx_sums: list[int]) -> list[float]:
        """`decode_step_s` of decode-only steps of `num_decode` requests, one per context sum,
        for an executor that `prices_decode_by_sum`: the latency model's vectorised price when
        it has one (the same floats), else one price at a time."""
        many = getattr(self.latency, "decode_steps_s", None)
        if many is not None and len(ctx_sums) >= VECTOR_MIN:
            return many(num_decode, np.array(ctx_sums, dtype=np.int64)).tolist()
        price = self.latency.shape_time_s
        return [price(StepShape([], [], num_decode, s)) for s in ctx_sums]

    def decode_step_s(self, node_id: int, step: Step, decode_ctx_sum: int, now: float) -> float:
        """`run_step` of a decode-only step whose contexts sum to `decode_ctx_sum` (the node
        keeps the sum as its batch repeats): the same shape, priced without walking the batch."""
        step_s = self.latency.shape_time_s(StepShape([], [], len(step.items), decode_ctx_sum))
        if self.transfer is not None:
            step_s += self.transfer(node_id, step.items, now)
        return step_s
