"""The central scheduler: the routing table and a routing policy behind a SimPy resource.

Every request takes one decision. A decision holds one of `lanes` parallel lanes for
`decision_time_s` (the article's partitioned hash + lock-free queues: independent paths through the
scheduler); a request that finds every lane busy waits, and that wait is part of its TTFT. The
decision reads the nodes at the moment its lane starts on it; the request reaches its node when
the lane is done. `lane_by: prefix` pins a request to the lane of its first page's key (the
article's hash partitioning: requests with one shared prefix all queue on one lane);
`lane_by: any` lets any free lane take it. With decision_time_s = 0 the router costs nothing and
decides inline, at arrival.

The reference driver (`exact_steps`) runs each decision as a SimPy process holding a
simpy.Resource. The default replays the very same events on the clock (sim/clock.py: `park`):
the process's start, its request granted, its decision time over, its lane's release (which lets
the head of the line in, as the resource does), each at the same (time, priority, id) order, so
decisions read the nodes and deliver at the same moments, without a process per request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from operator import attrgetter

import simpy
from simpy.core import URGENT

from sim.config import RouterConfig
from sim.node import Node
from sim.routing_table import RoutingTable
from sim.sequence import Sequence
from sim.views import NodeView, NodeViews, RouteQuery, node_load


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
        exact_steps: bool = True,
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
        # The default driver replays the lanes' resource events on the clock (`on_parked`);
        # `exact_steps` keeps the SimPy process per decision (the reference).
        self.exact_steps = exact_steps
        self._queues = [_LaneQueue(int(lane.capacity)) for lane in self.lanes]
        self.busy_s = 0.0  # lane-seconds spent deciding
        self._schedulers = [node.scheduler for node in nodes]  # queue lengths, read per decision

    # -- the decision ----------------------------------------------------------------------------
    def views(self, keys, node_ids: list[int] | None = None) -> NodeViews:
        """These nodes (default: all) as the policy sees them, each read when the policy first
        looks at it; the cached prefix only for policies that ask for it."""
        matched = None
        if self.needs_prefix_match:
            # The table entries read: pages decode spans filled with these keys are in the
            # table, as step by step (a node outside a span has none waiting: no key set).
            wanted = None
            for node in self.nodes:
                if node.in_span:
                    if wanted is None:
                        wanted = set(keys.tolist())
                    node.sync_index(wanted)
            matched = self.table.matched_pages(keys) * self.page_size
        ids = node_ids if node_ids is not None else range(len(self.nodes))
        nodes = self.nodes if node_ids is None else [self.nodes[i] for i in node_ids]
        queues = self._schedulers if node_ids is None else [n.scheduler for n in nodes]
        if matched is None:
            cached = [0] * len(ids)
        else:
            cached = (matched if node_ids is None else matched[node_ids]).tolist()
        views = NodeViews(
            len(ids),
            lambda at: self._view(ids[at], nodes[at], cached[at]),
            lambda at: self._load(nodes[at], views.outstanding()[at]),
            lambda: [len(q.waiting) + len(q.running) for q in queues],  # num_waiting + running
            lambda: cached,
            lambda ats: self._loads(nodes, views.outstanding(), ats),
        )
        return views

    def _loads(self, nodes: list[Node], outstanding: list[int], ats: list[int]) -> list[float]:
        """`_load` of the nodes at these positions, in one pass (a tie of many nodes)."""
        capacity = self.kv_capacity_tokens
        return [
            node_load(
                (node := nodes[at]).used_tokens(),
                node.waiting_prompt_tokens,
                capacity,
                outstanding[at],
                node.cfg.max_num_seqs,
            )
            for at in ats
        ]

    def _load(self, node: Node, outstanding: int) -> float:
        """NodeView.load of one node now, read without its free tokens (nor a span's sync)."""
        return node_load(
            node.used_tokens(),
            node.waiting_prompt_tokens,
            self.kv_capacity_tokens,
            outstanding,
            node.cfg.max_num_seqs,
        )

    def _view(self, node_id: int, node: Node, cached_prefix_tokens: int) -> NodeView:
        """One node now, read without bringing a decode span up to date."""
        free, used = node.free_and_used_tokens()
        return tuple.__new__(  # NodeView's fields in order (no keyword handling per node)
            NodeView,
            (
                node_id,
                node.num_waiting,
                node.num_running,
                self.kv_capacity_tokens,
                free,
                used,
                node.waiting_prompt_tokens,
                cached_prefix_tokens,
                node.cfg.max_num_seqs,
            ),
        )

    def decide(self, seq: Sequence) -> int:
        """Run the policy for one request; returns the node index."""
        req = seq.req
        # The prompt's page keys only if read (Sequence hashes them then): by the policy, or
        # for the routing table's prefix match.
        query = RouteQuery(
            req.request_id, req.prompt_tokens, None, self.page_size, self.env.now, lambda: seq.keys
        )
        # A crashed node is down until it restarts: the policy chooses among the others (if
        # every node is down, among all: the request is lost or waits there, sim/node.py).
        ids = None
        if self.env.now < max(map(_UP_AT, self.nodes)):  # a node is down (Node.down)
            up = [i for i, node in enumerate(self.nodes) if not node.down]
            ids = up if up else None
        views = self.views(seq.keys if self.needs_prefix_match else None, ids)
        choice = self.policy.route(query, views)
        if not 0 <= choice < len(views):
            raise AssertionError(f"routing policy returned node {choice} of {len(views)}")
        return choice if ids is None else ids[choice]

    # -- the lanes ---------------------------------------------------------------------------------
    def submit(self, seq: Sequence, deliver: Callable[[Sequence, int], None]) -> None:
        """Route `seq`; `deliver(seq, node)` is called when the decision is done."""
        if self.cfg.decision_time_s == 0:
            deliver(seq, self.decide(seq))
        elif self.exact_steps:
            self.env.process(self._decide_on_a_lane(seq, deliver))
        else:  # parked on the clock where the process above would start (URGENT, now)
            self.env.park(self.env.now, _Decision(self, seq, deliver), URGENT)  # type: ignore[attr-defined]

    def _decide_on_a_lane(self, seq: Sequence, deliver: Callable[[Sequence, int], None]):
        """The reference: a SimPy process holding a lane (a simpy.Resource) for the decision."""
        with self.lanes[self._lane(seq)].request() as turn:
            yield turn
            node = self.decide(seq)
            yield self.env.timeout(self.cfg.decision_time_s)
            self.busy_s += self.cfg.decision_time_s
        deliver(seq, node)

    def _lane(self, seq: Sequence) -> int:
        if len(self.lanes) == 1:
            return 0
        key = int(seq.keys[0]) if seq.keys.shape[0] else seq.req.request_id
        return key % len(self.lanes)

    def on_parked(self, d: _Decision) -> None:
        """The clock reached a parked moment of decision `d`: the moments the reference process
        resumes at and the resource events it creates, in the same (time, priority, id) order."""
        lane, env = self._queues[d.lane], self.env
        if d.stage == _START:  # the process starts and asks for its lane
            lane.waiting.append(d)
            self._grant(lane)
        elif d.stage == _GRANTED:  # its request granted: decide, hold the lane for the time
            d.node = self.decide(d.seq)
            d.stage = _DECIDED
            env.park(env.now + self.cfg.decision_time_s, d)  # type: ignore[attr-defined]
        elif d.stage == _DECIDED:  # the lane is released (its release event), then delivered
            self.busy_s += self.cfg.decision_time_s
            lane.users -= 1
            d.stage = _RELEASED
            env.park(env.now, d)  # type: ignore[attr-defined]
            d.deliver(d.seq, d.node)
        else:  # the release event: the head of the line may take the lane
            self._grant(lane)

    def _grant(self, lane: _LaneQueue) -> None:
        """As simpy.Resource on a new request or a processed release: only the head of the line
        is considered; granted, its request event fires now."""
        if lane.waiting and lane.users < lane.capacity:
            d = lane.waiting.popleft()
            lane.users += 1
            d.stage = _GRANTED
            self.env.park(self.env.now, d)  # type: ignore[attr-defined]


_START, _GRANTED, _DECIDED, _RELEASED = range(4)
_UP_AT = attrgetter("up_at")


class _LaneQueue:
    """A lane resource's state: requests holding it, and those waiting in line."""

    __slots__ = ("capacity", "users", "waiting")

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.users = 0
        self.waiting: deque[_Decision] = deque()


class _Decision:
    """One request's trip through a lane, parked on the clock (sim/clock.py)."""

    __slots__ = ("router", "seq", "deliver", "lane", "node", "stage")

    def __init__(self, router: Router, seq: Sequence, deliver: Callable[[Sequence, int], None]):
        self.router, self.seq, self.deliver = router, seq, deliver
        self.lane = router._lane(seq)
        self.node = -1
        self.stage = _START

    def step_ended(self) -> None:
        self.router.on_parked(self)
