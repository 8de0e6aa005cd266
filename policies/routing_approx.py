"""Routing policies that guess the caches from their own routing history (no cache events).

`sglang_cache_aware` keeps SGLang router's approximate tree per node; `decentralized` is K such
routers side by side, each knowing only the prompts it routed itself. The trees are
`sim.routing_table.ApproxPrefixTable` (page granularity; SGLang's tree holds characters).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.routing import PrefixAffinityParams, affinity_choice
from sim.routing_table import ApproxPrefixTable
from sim.views import NodeView, NodeViews, RouteQuery

# SGLang router defaults: its Rust library (CacheAwareConfig::default) and its Python CLI
# (sglang_router RouterArgs), as published; see docs/routing.md. Tree sizes count characters
# there and tokens here.
SGLANG_DEFAULTS: dict[str, dict[str, Any]] = {
    "library": dict(
        cache_threshold=0.5,
        balance_abs_threshold=32,
        balance_rel_threshold=1.1,
        eviction_interval_s=30.0,
        max_tree_tokens=10_000,
    ),
    "cli": dict(
        cache_threshold=0.3,
        balance_abs_threshold=64,
        balance_rel_threshold=1.5,
        eviction_interval_s=120.0,
        max_tree_tokens=2**26,
    ),
}


class SGLangCacheAwareParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    defaults: Literal["library", "cli"] = "library"  # which published set fills unset fields
    cache_threshold: float = Field(
        ge=0, le=1
    )  # min matched share of the prompt to follow the match
    balance_abs_threshold: int = Field(ge=0)  # outstanding requests, max - min
    balance_rel_threshold: float = Field(ge=1)  # max > rel x min
    eviction_interval_s: float = Field(ge=0)  # 0: never trim the trees
    max_tree_tokens: int = Field(gt=0)  # per node, kept at each trim

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        preset = SGLANG_DEFAULTS.get(data.get("defaults", "library"), SGLANG_DEFAULTS["library"])
        return {**preset, **data}


class SGLangCacheAware:
    """SGLang router: if outstanding requests are imbalanced (max - min > abs and max > rel x min),
    the least loaded node; else the node whose approximate tree matches most of the prompt if that
    share is above cache_threshold, else the node with the smallest tree; the prompt joins its tree."""

    Params = SGLangCacheAwareParams
    needs_prefix_match = False

    def __init__(self, params: SGLangCacheAwareParams, rng: np.random.Generator):
        self.p = params
        self.tree: ApproxPrefixTable | None = None
        self._last_trim_s = 0.0

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        if self.tree is None:
            self.tree = ApproxPrefixTable(len(views))
        self._maybe_trim(query, self.tree)
        choice = self._choose(query, views, self.tree)
        self.tree.insert(query.keys, choice)
        return choice

    def _choose(self, query: RouteQuery, views: Sequence[NodeView], tree: ApproxPrefixTable) -> int:
        loads = NodeViews.of(views).outstanding()
        high, low = max(loads), min(loads)
        if high - low > self.p.balance_abs_threshold and high > low * self.p.balance_rel_threshold:
            return loads.index(low)
        matched = tree.matched_pages(query.keys)
        best = int(np.argmax(matched))
        if matched[best] * query.page_size > self.p.cache_threshold * query.prompt_tokens:
            return best
        return min(range(len(views)), key=lambda i: (tree.num_pages(i), i))

    def _maybe_trim(self, query: RouteQuery, tree: ApproxPrefixTable) -> None:
        interval = self.p.eviction_interval_s
        if interval > 0 and query.now_s - self._last_trim_s >= interval:
            self._last_trim_s = query.now_s
            for node in range(tree.num_nodes):
                tree.trim(node, self.p.max_tree_tokens // query.page_size)


class DecentralizedParams(PrefixAffinityParams):
    num_routers: int = Field(default=4, gt=0)  # K
    assignment: Literal["random", "round_robin"] = "random"  # how requests reach a router


class Decentralized:
    """K independent routers; each request reaches one (random or in turn), which applies the
    article's rule to the prompts it routed itself only (longest match, 90% fallback)."""

    Params = DecentralizedParams
    needs_prefix_match = False

    def __init__(self, params: DecentralizedParams, rng: np.random.Generator):
        self.p = params
        self.rng = rng
        self.tables: list[ApproxPrefixTable] = []
        self._next = 0

    def route(self, query: RouteQuery, views: Sequence[NodeView]) -> int:
        if not self.tables:
            self.tables = [ApproxPrefixTable(len(views)) for _ in range(self.p.num_routers)]
        table = self.tables[self._pick_router()]
        choice = affinity_choice(
            views, (table.matched_pages(query.keys) * query.page_size).tolist(), self.p
        )
        table.insert(query.keys, choice)
        # A node cannot cache more than its pool: forget its least recently routed pages beyond that.
        table.trim(choice, views[choice].kv_capacity_tokens // query.page_size)
        return choice

    def _pick_router(self) -> int:
        if self.p.assignment == "random":
            return int(self.rng.integers(self.p.num_routers))
        router = self._next % self.p.num_routers
        self._next += 1
        return router
