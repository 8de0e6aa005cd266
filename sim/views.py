"""Read-only views the policies decide from; policies never touch simulator state.

A node's load (`NodeView.load`, also the `load` column of timeseries.csv) is the share of its
binding capacity that the work already sent to it claims, in [0, 1]:

    load = min(1, max(kv_demand, seq_demand))
    kv_demand  = (KV tokens held by running requests + prompt tokens of queued requests) / KV capacity
    seq_demand = (running + queued requests) / max_num_seqs

A node is full when either its KV pool or its batch slots run out, so the larger share counts.
Queued prompts count in full (their cached prefix is not subtracted): an upper bound on the KV
they will take. The article's layer 2 compares this number with its 90% threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from collections.abc import Sequence as Seq
from typing import NamedTuple, overload

import numpy as np


def node_load(
    kv_used_tokens: int,
    waiting_prompt_tokens: int,
    kv_capacity_tokens: int,
    num_outstanding: int,
    max_num_seqs: int,
) -> float:
    """The load definition above (one function, so the router and the metrics agree)."""
    kv_demand = (kv_used_tokens + waiting_prompt_tokens) / max(1, kv_capacity_tokens)
    seq_demand = num_outstanding / max(1, max_num_seqs)
    return min(1.0, max(kv_demand, seq_demand))


class NodeView(NamedTuple):
    """One node as the router sees it at decision time (a tuple: cheap to build, immutable)."""

    node_id: int
    num_waiting: int
    num_running: int
    kv_capacity_tokens: int
    kv_free_tokens: int  # free plus evictable cached tokens
    kv_used_tokens: int  # held by running requests
    waiting_prompt_tokens: int  # prompt tokens of the queued requests
    cached_prefix_tokens: int  # of the request being routed, per the routing table (0 if not asked)
    max_num_seqs: int = 256  # batch slots (NodeConfig.max_num_seqs)

    @property
    def load(self) -> float:
        return node_load(
            self.kv_used_tokens,
            self.waiting_prompt_tokens,
            self.kv_capacity_tokens,
            self.num_waiting + self.num_running,
            self.max_num_seqs,
        )

    @property
    def outstanding(self) -> int:
        """Requests sent to the node and not finished (queued + running)."""
        return self.num_waiting + self.num_running

    @property
    def kv_utilization(self) -> float:
        """Share of the KV pool held by running requests (vLLM's kv_cache_usage_perc)."""
        return self.kv_used_tokens / max(1, self.kv_capacity_tokens)


class NodeViews(Seq[NodeView]):
    """Every node as a routing policy sees it at one decision, each view built when first read.

    A policy that weighs a few nodes (the prefix holders, a tie) reads only their KV, and only
    what their `load` needs when it asks for no more; the queue lengths every load rule compares
    (`outstanding`) and the routing table's matches (`cached_prefix_tokens`) come as plain lists,
    read once per decision. Nothing changes while a policy decides, so it sees what a list of
    every view built at once would show.
    """

    __slots__ = (
        "_view",
        "_views",
        "_load_of",
        "_loads_of",
        "_loads",
        "_outstanding_of",
        "_outstanding",
        "_cached_of",
        "_cached",
    )

    def __init__(
        self,
        num_nodes: int,
        view: Callable[[int], NodeView],
        load: Callable[[int], float],
        outstanding: Callable[[], list[int]],
        cached_prefix_tokens: Callable[[], list[int]],
        loads: Callable[[list[int]], list[float]] | None = None,
    ):
        self._view = view  # position -> its NodeView
        self._views: list[NodeView | None] = [None] * num_nodes
        self._load_of = load  # position -> its NodeView's load
        # positions -> their loads, in one pass (a tie of many nodes); default: one by one
        self._loads_of = loads or (lambda ats: [load(i) for i in ats])
        self._loads: list[float | None] = [None] * num_nodes
        self._outstanding_of = outstanding
        self._outstanding: list[int] | None = None
        self._cached_of = cached_prefix_tokens
        self._cached: list[int] | None = None

    @classmethod
    def of(cls, views: Seq[NodeView]) -> NodeViews:
        """`views` as NodeViews (itself if it is one: a router's; else views built at once)."""
        if isinstance(views, NodeViews):
            return views
        built = list(views)
        return cls(
            len(built),
            built.__getitem__,
            lambda i: built[i].load,
            lambda: [v.outstanding for v in built],
            lambda: [v.cached_prefix_tokens for v in built],
            lambda ats: [built[i].load for i in ats],
        )

    def load(self, i: int) -> float:
        """views[i].load, without building the view if it is not built yet."""
        load = self._loads[i]
        if load is None:
            view = self._views[i]
            load = self._loads[i] = self._load_of(i) if view is None else view.load
        return load

    def loads(self, positions: list[int]) -> list[float]:
        """[self.load(i) for i in positions]: the loads not read yet read in one pass."""
        known, views = self._loads, self._views
        missing = [i for i in positions if known[i] is None]
        if missing:
            built = [i for i in missing if views[i] is not None]
            for i in built:
                known[i] = views[i].load  # type: ignore[union-attr]
            unread = [i for i in missing if known[i] is None] if built else missing
            for i, load in zip(unread, self._loads_of(unread), strict=True):
                known[i] = load
        return [known[i] for i in positions]  # type: ignore[misc]

    def outstanding(self) -> list[int]:
        """Each node's NodeView.outstanding (queued + running requests), in view order."""
        if self._outstanding is None:
            self._outstanding = self._outstanding_of()
        return self._outstanding

    def cached_prefix_tokens(self) -> list[int]:
        """Each node's NodeView.cached_prefix_tokens, in view order."""
        if self._cached is None:
            self._cached = self._cached_of()
        return self._cached

    def __len__(self) -> int:
        return len(self._views)

    @overload
    def __getitem__(self, i: int) -> NodeView: ...
    @overload
    def __getitem__(self, i: slice) -> list[NodeView]: ...
    def __getitem__(self, i: int | slice) -> NodeView | list[NodeView]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self._views))[i]]
        view = self._views[i]  # IndexError past the end, as a list
        if view is None:
            view = self._views[i] = self._view(i % len(self._views))
        return view

    def __iter__(self) -> Iterator[NodeView]:
        return (self[i] for i in range(len(self._views)))


class RouteQuery:
    """The request being routed, as the router sees it. `keys` (uint64 [full prompt pages]: the
    chained page keys of the prompt) may come from `keys_of` on first read instead: hashing a
    prompt costs, and most policies never look."""

    __slots__ = ("request_id", "prompt_tokens", "_keys", "page_size", "now_s", "_keys_of")

    def __init__(
        self,
        request_id: int,
        prompt_tokens: int,
        keys: np.ndarray | None,
        page_size: int,
        now_s: float = 0.0,  # simulated time of the decision
        keys_of: Callable[[], np.ndarray] | None = None,
    ):
        assert keys is not None or keys_of is not None, "RouteQuery needs keys or keys_of"
        self.request_id, self.prompt_tokens, self.page_size = request_id, prompt_tokens, page_size
        self.now_s = now_s
        self._keys, self._keys_of = keys, keys_of

    @property
    def keys(self) -> np.ndarray:
        if self._keys is None:
            self._keys = self._keys_of()  # type: ignore[misc]
        return self._keys
