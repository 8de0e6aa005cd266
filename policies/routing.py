"""Routing policies: pick the node for a request from read-only node views.

A policy whose class sets `needs_prefix_match = True` gets, in each view, the cached prefix the
node holds for the request per the exact routing table (sim/routing_table.py); the others get 0
there and keep whatever view of the caches they build themselves (policies/routing_approx.py).
Published defaults are the parameters' defaults; docs/routing.md gives their sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from policies.params import NoParams
from sim.policy_api import RoutingPolicy
from sim.views import NodeView, NodeViews, RouteQuery

__all__ = ["RoutingPolicy"]


def least_loaded_index(views: Sequence[NodeView], among: Sequence[int] | None = None) -> int:
    """Fewest outstanding requests; ties go to the lower load, then the lower index. `among`: only
    these indices, else every view. (Loads are computed only where the counts tie: a router's
    NodeViews reads a node's KV only then, and only the used tokens a load needs.)"""
    views = NodeViews.of(views)
    outstanding = views.outstanding()
    candidates: Sequence[int] = range(len(outstanding)) if among is None else among
    if among is not None:
        outstanding = [outstanding[i] for i in among]
    fewest = min(outstanding)
    tied = [i for i, n in zip(candidates, outstanding, strict=True) if n == fewest]
    if len(tied) == 1:
        return tied[0]
    return min(zip(views.loads(tied), tied, strict=True))[1]  # lower load, then lower index


class RoundRobin:
    """Nodes in turn, blind to cache and load."""

    Params = NoParams
    needs_prefix_match = False

    def __init__(self, params: NoParams, rng: np.random.Generator):
        self._next = 0

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        choice = self._next % len(views)
        self._next += 1
        return choice


class Random:
    """A node drawn uniformly at random (the run's seeded generator)."""

    Params = NoParams
    needs_prefix_match = False

    def __init__(self, params: NoParams, rng: np.random.Generator):
        self.rng = rng

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        return int(self.rng.integers(len(views)))


class LeastLoaded:
    """The node with the fewest outstanding (waiting + running) requests."""

    Params = NoParams
    needs_prefix_match = False

    def __init__(self, params: NoParams, rng: np.random.Generator):
        pass

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        return least_loaded_index(views)


class LeastKV:
    """The node with the most free KV (free + evictable); ties to fewer outstanding, lower index."""

    Params = NoParams
    needs_prefix_match = False

    def __init__(self, params: NoParams, rng: np.random.Generator):
        pass

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        return min(
            range(len(views)), key=lambda i: (-views[i].kv_free_tokens, views[i].outstanding, i)
        )


class PrefixAffinityParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    load_threshold: float = Field(default=0.9, gt=0, le=1)  # the article's 90%
    fallback: bool = True  # False: layer 1 only (the hot-spot what-if)
    # Among nodes with equally long matches: the least loaded (ours), or the first one, as a table
    # that answers "a node holding it" does (the article's layer 1 read literally).
    tie_break: Literal["least_loaded", "first"] = "least_loaded"


class PrefixAffinity:
    """The article's scheduler: the node with the longest cached prefix (ties: least loaded, or the
    first), unless its load is above `load_threshold`, then the least loaded; no match: least loaded."""

    Params = PrefixAffinityParams
    needs_prefix_match = True

    def __init__(self, params: PrefixAffinityParams, rng: np.random.Generator):
        self.p = params

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        views = NodeViews.of(views)
        return affinity_choice(views, views.cached_prefix_tokens(), self.p)


def affinity_choice(
    views: Sequence[NodeView], matched: Sequence[int], p: PrefixAffinityParams
) -> int:
    """Layer 1 (longest match, ties to the least loaded) then layer 2 (load fallback)."""
    views = NodeViews.of(views)
    longest = max(matched)
    if longest == 0:
        return least_loaded_index(views)
    holders = [i for i, m in enumerate(matched) if m == longest]
    best = holders[0] if p.tie_break == "first" else least_loaded_index(views, holders)
    if p.fallback and views.load(best) > p.load_threshold:
        return least_loaded_index(views)
    return best


class KVCostParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    overlap_weight: float = Field(default=1.0, ge=0)  # Dynamo --kv-overlap-score-weight
    temperature: float = Field(default=0.0, ge=0)  # Dynamo --router-temperature; 0 = argmin


class KVCost:
    """Dynamo's KV router: cost = overlap_weight x prefill blocks still to compute + active blocks
    (in flight on the node plus this request's); argmin, or softmax sampling with a temperature."""

    Params = KVCostParams
    needs_prefix_match = True

    def __init__(self, params: KVCostParams, rng: np.random.Generator):
        self.p = params
        self.rng = rng

    def costs(self, query: RouteQuery, views: Sequence[NodeView]) -> np.ndarray:
        """float64 [nodes]: each node's cost in blocks (pages)."""
        page = query.page_size
        request_blocks = -(-query.prompt_tokens // page)
        out = np.empty(len(views))
        for i, v in enumerate(views):
            prefill = request_blocks - v.cached_prefix_tokens // page
            active = (v.kv_used_tokens + v.waiting_prompt_tokens) / page + request_blocks
            out[i] = self.p.overlap_weight * prefill + active
        return out

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        costs = self.costs(query, views)
        if self.p.temperature == 0:
            return int(np.argmin(costs))
        return softmax_pick(-costs, self.p.temperature, self.rng)


def softmax_pick(scores: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Sample an index with probability ~ exp(normalised score / temperature); scores are first
    scaled to [0, 1] by their range, so the temperature does not depend on their units."""
    span = scores.max() - scores.min()
    scaled = (scores - scores.max()) / span if span > 0 else np.zeros_like(scores)
    weights = np.exp(scaled / temperature)
    return int(rng.choice(scores.shape[0], p=weights / weights.sum()))


class WeightedScorersParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prefix_weight: float = Field(default=3.0, ge=0)  # llm-d prefix-cache-scorer
    queue_weight: float = Field(default=2.0, ge=0)  # llm-d queue-scorer
    kv_weight: float = Field(default=2.0, ge=0)  # llm-d kv-cache-utilization-scorer


class WeightedScorers:
    """llm-d's scheduler: the highest weighted sum of scores in [0, 1] (prefix: cached share of the
    prompt; queue: (max - own) / (max - min) waiting requests; KV: 1 - utilisation); ties random."""

    Params = WeightedScorersParams
    needs_prefix_match = True

    def __init__(self, params: WeightedScorersParams, rng: np.random.Generator):
        self.p = params
        self.rng = rng

    def scores(self, query: RouteQuery, views: Sequence[NodeView]) -> np.ndarray:
        prefix = np.array([v.cached_prefix_tokens for v in views]) / max(1, query.prompt_tokens)
        queue = np.array([v.num_waiting for v in views], dtype=np.float64)
        span = queue.max() - queue.min()
        queue_score = (queue.max() - queue) / span if span > 0 else np.ones_like(queue)
        kv_score = 1.0 - np.array([min(1.0, v.kv_utilization) for v in views])
        return (
            self.p.prefix_weight * prefix
            + self.p.queue_weight * queue_score
            + self.p.kv_weight * kv_score
        )

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        scores = self.scores(query, views)
        best = np.flatnonzero(scores >= scores.max() - 1e-12)
        return int(best[0]) if best.size == 1 else int(self.rng.choice(best))
