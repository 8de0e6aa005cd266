"""The central scheduler: the routing table and a routing policy behind a SimPy resource.

Every request takes one decision. A decision holds one of `lanes` parallel lanes for
`decision_time_s` (the article's partitioned hash + lock-free queues: independent paths through the
scheduler); a request that finds every lane busy waits, and that wait is part of its TTFT. The
decision reads the nodes at the moment its lane starts on it; the request reaches its node when
the lane is done. `lane_by: prefix` pins a request to the lane of its first page's key (the
article's hash partitioning: requests with one shared prefix all queue on one lane);
`lane_by: any` lets any free lane take it. With decision_time_s = 0 the router costs nothing and
decides inline, at arrival.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from sim.config import RouterConfig
from sim.node import Node
from sim.routing_table import RoutingTable
from sim.sequence import Sequence
from sim.views import NodeView, RouteQuery


class Router:
    def __init__(
        self,
        env: simpy.Environment,
        cfg: RouterConfig,
        policy,
        table: RoutingTable,
        nodes: list[Node],
        page_size: int,
        kv_capacity_tokens: int,
        token_bytes: int,
    ):
        self.env = env
        self.cfg = cfg
        self.policy = policy
        self.table = table
        self.nodes = nodes
        self.page_size = page_size
        self.kv_capacity_tokens = kv_capacity_tokens
        self.token_bytes = token_bytes
        self.needs_prefix_match = policy.needs_prefix_match
        if cfg.lane_by == "any":
            self.lanes = [simpy.Resource(env, capacity=cfg.lanes)]
        else:
            self.lanes = [simpy.Resource(env, capacity=1) for _ in range(cfg.lanes)]
        self.busy_s = 0.0  # lane-seconds spent deciding

    # -- the decision ----------------------------------------------------------------------------
    def views(self, keys) -> list[NodeView]:
        """Every node as the policy sees it; the cached prefix only for policies that ask for it."""
        matched = self.table.matched_pages(keys).tolist() if self.needs_prefix_match else None
        page_size, capacity, new = self.page_size, self.kv_capacity_tokens, tuple.__new__
        out = []
        for i, node in enumerate(self.nodes):
            kv = node.kv
            out.append(
                new(  # NodeView's fields in order (tuple.__new__: no keyword handling per node)
                    NodeView,
                    (
                        i,
                        len(node.waiting),
                        len(node.running),
                        capacity,
                        kv.free_tokens(),
                        kv.used_tokens(),
                        node.waiting_prompt_tokens,
                        matched[i] * page_size if matched is not None else 0,
                        node.cfg.max_num_seqs,
                    ),
                )
            )
        return out

    def decide(self, seq: Sequence) -> int:
        """Run the policy for one request; returns the node index."""
        req = seq.req
        query = RouteQuery(
            req.request_id, req.prompt_tokens, seq.keys, self.page_size, self.env.now
        )
        views = self.views(seq.keys)
        # A crashed node is down until it restarts: the policy chooses among the others (if
        # every node is down, among all: the request is lost or waits there, sim/node.py).
        up = [v for v, node in zip(views, self.nodes, strict=True) if not node.down] or views
        choice = self.policy.route(query, up)
        if not 0 <= choice < len(up):
            raise AssertionError(f"routing policy returned node {choice} of {len(up)}")
        return up[choice].node_id

    # -- the resource ----------------------------------------------------------------------------
    def submit(self, seq: Sequence, deliver: Callable[[Sequence, int], None]) -> None:
        """Route `seq`; `deliver(seq, node)` is called when the decision is done."""
        if self.cfg.decision_time_s == 0:
            deliver(seq, self.decide(seq))
            return
        self.env.process(self._decide_on_a_lane(seq, deliver))

    def _decide_on_a_lane(self, seq: Sequence, deliver: Callable[[Sequence, int], None]):
        with self._lane(seq).request() as turn:
            yield turn
            node = self.decide(seq)
            yield self.env.timeout(self.cfg.decision_time_s)
            self.busy_s += self.cfg.decision_time_s
        deliver(seq, node)

    def _lane(self, seq: Sequence) -> simpy.Resource:
        if len(self.lanes) == 1:
            return self.lanes[0]
        key = int(seq.keys[0]) if seq.keys.shape[0] else seq.req.request_id
        return self.lanes[key % len(self.lanes)]
