"""The cluster: a central router process in front of N nodes, fed by a workload.

Open loop: requests enter at their `arrival_s`. Closed loop: each client sends its next request
as soon as the previous one finishes. Every request goes through the routing policy, which sees
read-only node views (queue, running, KV, and the cached prefix length per the routing table).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from simpy.core import URGENT

from sim.cascade import CascadeExecutor, DecodeBatchExecutor
from sim.clock import Clock
from sim.config import ConfigError, ExperimentConfig, PolicySpec
from sim.executor import DecodePrices, ModelledExecutor, StepExecutor
from sim.kv.manager import PagedKV, contiguous_kv_from_config, paged_kv_from_config
from sim.kv.protocol import KVManager
from sim.latency import make_latency_model
from sim.latency.base import prices_decode_batch
from sim.metrics import Recorder
from sim.node import Node
from sim.policy_api import MakePolicy, PlacementStrategy
from sim.request import Request, Workload
from sim.request_log import RequestLog
from sim.router import Router
from sim.routing_table import RoutingTable
from sim.scheduler import Scheduler, Step
from sim.sequence import Sequence, Status, new_sequence
from sim.steps import preempt_events, step_row
from sim.xnode.placement import PlacedKV, Placement, make_placement

# A closed-loop client whose request was rejected waits this long before its next one (our
# choice; retrying at once would spin on a full pool).
REJECT_BACKOFF_S = 1.0


class Cluster:
    def __init__(
        self,
        cfg: ExperimentConfig,
        workload: Workload,
        rng: np.random.Generator,
        make_policy: MakePolicy,
    ):
        self.cfg = cfg
        self.env = Clock()  # SimPy's, plus the node step-end queue (sim/clock.py)
        self.workload = workload
        self.rng = rng
        self.make_policy = make_policy
        self.latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
        self.decode_prices = DecodePrices(self.latency)  # memoised span prices, for every node
        self.table = RoutingTable(cfg.cluster.num_nodes)
        self.page_size = cfg.cache.page_size
        self.token_bytes = cfg.model.kv_bytes_per_token
        self.capacity_bytes = cfg.kv_capacity_bytes
        self.recorder = Recorder(cfg)
        self.step_rows: list[tuple] | None = [] if cfg.record_steps else None
        self.event_rows: list[tuple] = []  # with record_steps: events.csv (sim/steps.py)
        self._paged: list[PagedKV] = []  # paged managers (their caches can feed the table)
        kvs = self._make_kvs()
        self.nodes = [self._make_node(i, kv) for i, kv in enumerate(kvs)]
        self.router = Router(
            self.env,
            cfg.router,
            make_policy("routing", cfg.policies.routing, rng),
            self.table,
            self.nodes,
            self.page_size,
            self.capacity_bytes // self.token_bytes,
            self.token_bytes,
            exact_steps=cfg.exact_steps,
        )
        if self.router.needs_prefix_match:  # the only reader of the table: else nobody keeps it
            for kv in self._paged:
                kv.cache.listeners.append(self.table.on_cache_event)
                self.table.watch(kv.cache.node_id, kv.cache.index)  # reads its level-1 slots
        self._failures_in_a_row = 0  # closed loop: consecutive requests that can never fit
        self._in_flight = 0  # dispatched, not yet finished or failed
        # every request dispatched, in order; each let go of as an object once over (a row)
        self.sequences = RequestLog()

    # -- construction --------------------------------------------------------------------------
    def _make_kvs(self) -> list[KVManager]:
        """Each node's KV manager; with cross-node placement, wrapped so pages may go to peers."""
        c, n = self.cfg.cache, self.cfg.cluster.num_nodes
        self.placement: Placement | None = None
        if c.mechanism == "contiguous":
            return [contiguous_kv_from_config(self.cfg) for _ in range(n)]
        paged = [
            paged_kv_from_config(self.cfg, self.latency, i, self.make_policy) for i in range(n)
        ]
        self._paged = paged
        self.placement = make_placement(
            self.cfg, paged, lambda: self.env.now, self._wake, self._placement_strategy()
        )
        if self.placement is None:
            return list(paged)
        return [PlacedKV(kv, i, self.placement) for i, kv in enumerate(paged)]

    def _make_node(self, node_id: int, kv: KVManager) -> Node:
        transfer = self.placement.traffic.step_transfer_s if self.placement is not None else None
        return Node(
            self.env,
            node_id,
            Scheduler(
                self.cfg.node,
                kv,
                self.make_policy("scheduling", self.cfg.policies.scheduling),
            ),
            self._executor(transfer),
            self._on_finish,
            self._record_step if self.step_rows is not None else None,
            self._on_crash,
            self.cfg.cache.restart_s,
            exact_steps=self.cfg.exact_steps,
        )

    def _placement_strategy(self) -> PlacementStrategy | None:
        """The placement policy (None: local_only, every page on its request's node)."""
        p = self.cfg.placement
        if p.policy == "local_only":
            return None
        params = {"shard_nodes": p.shard_nodes, "stripe_pages": p.stripe_pages}
        spec = PolicySpec(name=p.policy, params=params if p.policy == "shard" else {})
        return self.make_policy("placement", spec)

    def _executor(self, transfer) -> StepExecutor:
        """The latency model prices each step (decode as a cascade kernel if asked; from the
        decode batch itself, its shared pages and longest context, where the model has those
        measured terms on: gpu.shared_page_reads, gpu.ragged_decode)."""
        if self.cfg.node.decode_attention == "cascade":
            return CascadeExecutor(self.latency, transfer, self.page_size)
        if prices_decode_batch(self.latency):
            return DecodeBatchExecutor(self.latency, transfer, self.page_size, self.decode_prices)
        return ModelledExecutor(self.latency, transfer, self.decode_prices)

    def _wake(self, node_id: int) -> None:
        self.nodes[node_id].wake()

    def _record_step(self, node_id: int, start_s: float, duration_s: float, step: Step) -> None:
        assert self.step_rows is not None
        self.step_rows.append(step_row(node_id, len(self.step_rows), start_s, duration_s, step))
        self.event_rows.extend(preempt_events(node_id, start_s, step))

    # -- running -------------------------------------------------------------------------------
    def run(self, progress=None) -> None:
        if self.workload.num_clients is None:
            if self.cfg.exact_steps:
                self.env.process(self._open_loop(self.workload.requests))
            else:  # the same arrivals parked on the clock (where the process would start)
                self.env.park(self.env.now, _Arrivals(self, self.workload.requests), URGENT)
        else:
            for client in range(self.workload.num_clients):
                self.env.process(self._client(client))
        self.env.process(self.recorder.sample_loop(self.env, self))
        step = max(1.0, self.cfg.duration_s / 100)
        t = 0.0
        while t < self.cfg.duration_s:
            t = min(self.cfg.duration_s, t + step)
            self.env.run(until=t)
            if progress is not None:
                progress(t)
        self._drain()
        for seq in self.sequences.live():
            if seq.status in (Status.WAITING, Status.RUNNING):
                seq.status = Status.UNFINISHED

    def _drain(self) -> None:
        """drain_s > 0: nothing new is sent after duration_s; run on, one simulated second at a
        time, until no request is in flight or drain_s has passed."""
        end = self.cfg.duration_s + self.cfg.drain_s
        while self._in_flight and self.env.now < end:
            self.env.run(until=min(end, self.env.now + 1.0))

    def _sending(self) -> bool:
        """Clients send new requests until duration_s only when a drain window follows."""
        return self.cfg.drain_s == 0 or self.env.now < self.cfg.duration_s

    MAX_FAILURES_IN_A_ROW = 10_000

    def _check_not_all_failing(self) -> None:
        """A closed-loop client whose requests all fail would spin at one instant forever."""
        self._failures_in_a_row += 1
        if self._failures_in_a_row >= self.MAX_FAILURES_IN_A_ROW:
            raise ConfigError(
                f"workload: {self.MAX_FAILURES_IN_A_ROW} requests in a row can never fit one node "
                "(prompt + output longer than its KV pool or max_model_len); use larger nodes or shorter requests"
            )

    def _open_loop(self, requests: Iterator[Request]):
        """The reference driver's arrival process (the default parks `_Arrivals` instead)."""
        for req in requests:
            assert req.arrival_s is not None  # an open-loop workload stamps every request
            if req.arrival_s >= self.cfg.duration_s:
                return
            if req.arrival_s > self.env.now:
                yield self.env.timeout(req.arrival_s - self.env.now)
            self.dispatch(req)

    def _client(self, client: int):
        while self._sending():
            req = next(self.workload.requests, None)
            if req is None:
                return
            seq = self.dispatch(req)
            if seq.status == Status.FAILED:
                self._check_not_all_failing()
                continue
            self._failures_in_a_row = 0
            seq.done = self.env.event()
            yield seq.done
            seq.done = None  # over: its event need not live as long as the request's record
            if seq.status == Status.FAILED:  # rejected for memory (cache.on_oom reject)
                yield self.env.timeout(REJECT_BACKOFF_S)

    def dispatch(self, req: Request) -> Sequence:
        """Route one request to a node (or fail it at once if it can never be served)."""
        now = self.env.now
        seq = new_sequence(req, self.page_size, self.cfg.cache.hash_bits, now)
        self.sequences.append(seq)
        self._in_flight += 1
        if not self._can_ever_fit(seq):
            seq.status = Status.FAILED
            seq.finish_s = now
            self._on_finish(seq)
            return seq
        self.router.submit(seq, self._deliver)
        return seq

    def _deliver(self, seq: Sequence, node: int) -> None:
        """The router has decided: the request joins the node's queue."""
        seq.routed_s = self.env.now
        self.nodes[node].submit(seq)

    def _can_ever_fit(self, seq: Sequence) -> bool:
        """Could an empty node place this request whole? If not it fails at once rather than
        blocking its node's queue for the rest of the run (same arithmetic as admission)."""
        node = self.nodes[0]  # its pool's size only: no need to bring a decode span up to date
        return node.scheduler.kv.can_ever_fit(seq, node.headroom_tokens)

    def _on_crash(self, node_id: int, lost: list[Sequence]) -> None:
        """A node's serving process died with these requests: an open-loop request fails; a
        closed-loop client sends its request again once the node is back (its TTFT and E2E keep
        the original arrival, so they include the outage)."""
        for seq in lost:
            if seq.done is None:
                seq.status = Status.FAILED
                seq.finish_s = self.env.now
                self._on_finish(seq)
            else:
                self.env.process(self._resend(seq, self.nodes[node_id].up_at - self.env.now))

    def _resend(self, seq: Sequence, after_s: float):
        yield self.env.timeout(max(0.0, after_s))
        seq.reset_progress()
        self.router.submit(seq, self._deliver)

    def _on_finish(self, seq: Sequence) -> None:
        self._in_flight -= 1
        seq.drop_tokens()
        if seq.done is not None and not seq.done.triggered:
            seq.done.succeed()
        self.sequences.close(seq)


class _Arrivals:
    """The open loop without a SimPy process: each request's arrival is parked on the clock
    where `Cluster._open_loop` would wait for its timeout (at now + (arrival - now), ordered
    as that timeout), and dispatched when the clock reaches it: the same moments, in the same
    order among all events."""

    def __init__(self, cluster: Cluster, requests: Iterator[Request]):
        self.cluster = cluster
        self.requests = requests
        self.pending: Request | None = None  # the request whose arrival is parked

    def step_ended(self) -> None:
        cluster, env = self.cluster, self.cluster.env
        if self.pending is not None:
            req, self.pending = self.pending, None
            cluster.dispatch(req)
        for req in self.requests:
            assert req.arrival_s is not None  # an open-loop workload stamps every request
            if req.arrival_s >= cluster.cfg.duration_s:
                return
            if req.arrival_s > env.now:
                self.pending = req
                env.park(env.now + (req.arrival_s - env.now), self)
                return
            cluster.dispatch(req)
