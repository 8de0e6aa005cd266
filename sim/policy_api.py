"""The decisions sim/ delegates, as Protocols; policies/ implements them, the application injects them.

sim/ never imports a concrete policy: whoever builds a cluster hands it a `MakePolicy` factory
(the application passes `policies.make_policy`), and sim asks it for one object per decision.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from typing import Any, Protocol

import numpy as np

from sim.config import PolicySpec
from sim.kv.views import PageStats, Segment
from sim.sequence import Sequence
from sim.views import NodeView, RouteQuery


class RoutingPolicy(Protocol):
    needs_prefix_match: bool

    def route(self, query: RouteQuery, views: Seq[NodeView]) -> int:
        """Index of the chosen node in `views`."""
        ...


class EvictionPolicy(Protocol):
    def priority(self, stats: PageStats, pages: np.ndarray, now: float) -> np.ndarray:
        """float64 [len(pages)]: eviction priority of each page; the lowest is evicted first."""
        ...


class AdmissionPolicy(Protocol):
    def admit(self, segment: Segment) -> bool:
        """True to index the segment's pages for reuse; False frees them when the request ends."""
        ...


class MakePolicy(Protocol):
    def __call__(self, kind: str, spec: PolicySpec, rng: np.random.Generator | None = None) -> Any:
        """A policy object of `kind` ("routing", "eviction", ...) as `spec` names it."""
        ...


class SchedulingPolicy(Protocol):
    def victim(self, running: list[Sequence]) -> Sequence:
        """The running request to preempt when another cannot get memory."""
        ...


class PlacementStrategy(Protocol):
    """Where a request's KV pages go when they may leave its node (sim/xnode/placement.py)."""

    keep_local_when_it_fits: bool  # a request whose pages all fit on its node stays local

    def members(self, owner: int, peers_by_room: list[int]) -> tuple[int, ...]:
        """Nodes a new placed request's pages rotate over (empty: no fixed set)."""
        ...

    def preferred_nodes(
        self,
        owner: int,
        members: tuple[int, ...],
        first: int,
        need: int,
        room: list[int],
        peers_by_room: list[int],
    ) -> list[int]:
        """Preferred node of each logical page first .. first+need-1 (placement then sends a
        page whose node is full to the node with the most room)."""
        ...

    def busiest_node_pages(self, pages: int, num_nodes: int) -> int:
        """Pages the most loaded node would hold if a request of `pages` were placed whole."""
        ...
