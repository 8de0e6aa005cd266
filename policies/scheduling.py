"""Scheduling decisions: which running request gives way when another cannot get KV memory.

The scheduler (sim/scheduler.py) runs the running requests first, then admits waiting ones in
FCFS order; when a running request cannot grow it asks the policy for a victim, preempts it
(recompute) and retries, as vLLM does.
"""

from __future__ import annotations

from policies.params import NoParams
from sim.policy_api import SchedulingPolicy
from sim.sequence import Sequence

__all__ = ["SchedulingPolicy"]


class Newest:
    """vLLM's rule: preempt the most recently admitted running request."""

    Params = NoParams

    def __init__(self, params: NoParams):
        pass

    def victim(self, running: list[Sequence]) -> Sequence:
        return running[-1]


class LongestContext:
    """Preempt the request holding the most KV (frees the most memory per preemption; its
    recompute costs the most); ties go to the newest."""

    Params = NoParams

    def __init__(self, params: NoParams):
        pass

    def victim(self, running: list[Sequence]) -> Sequence:
        return max(reversed(running), key=lambda s: s.num_computed)
