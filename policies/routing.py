"""Routing policies: pick the node for a request from read-only node views."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sim.views import NodeView, RouteQuery


class RoutingPolicy(Protocol):
    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        """Index of the chosen node in `views`."""
        ...


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


def least_loaded_index(views: Sequence[NodeView]) -> int:
    """Fewest outstanding requests; ties go to the lower memory load, then the lower index."""
    return min(range(len(views)), key=lambda i: (views[i].outstanding, views[i].load, i))


class RoundRobin:
    """Nodes in turn, blind to cache and load."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator):
        self._next = 0

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        choice = self._next % len(views)
        self._next += 1
        return choice


class LeastLoaded:
    """The node with the fewest outstanding (waiting + running) requests."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator):
        pass

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        return least_loaded_index(views)


class PrefixAffinityParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    load_threshold: float = Field(default=0.9, gt=0, le=1)
    fallback: bool = True


class PrefixAffinity:
    """The article's scheduler: the node holding the longest cached prefix, unless its load is
    above `load_threshold` (90%), then the least loaded node."""

    Params = PrefixAffinityParams

    def __init__(self, params: PrefixAffinityParams, rng: np.random.Generator):
        self.p = params

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        best = max(range(len(views)), key=lambda i: (views[i].cached_prefix_tokens, -views[i].outstanding, -i))
        if views[best].cached_prefix_tokens == 0:
            return least_loaded_index(views)
        if self.p.fallback and views[best].load > self.p.load_threshold:
            return least_loaded_index(views)
        return best
