"""The cluster: a central router process in front of N nodes, fed by a workload.

Open loop: requests enter at their `arrival_s`. Closed loop: each client sends its next request
as soon as the previous one finishes. Every request goes through the routing policy, which sees
read-only node views (queue, running, KV, and the cached prefix length per the routing table).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import simpy

from sim.config import ConfigError, ExperimentConfig
from sim.kv.contiguous import ContiguousAllocator
from sim.kv.hashing import page_keys
from sim.kv.manager import ContiguousKV, paged_kv_from_config
from sim.latency import make_latency_model
from sim.metrics import Recorder
from sim.node import Node
from sim.policy_api import MakePolicy
from sim.request import Request, Workload
from sim.router import Router
from sim.routing_table import RoutingTable
from sim.sequence import Sequence, Status
from sim.xnode.placement import make_placement


class Cluster:
    def __init__(
        self,
        cfg: ExperimentConfig,
        workload: Workload,
        rng: np.random.Generator,
        make_policy: MakePolicy,
    ):
        self.cfg = cfg
        self.env = simpy.Environment()
        self.workload = workload
        self.rng = rng
        self.make_policy = make_policy
        self.latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
        self.table = RoutingTable(cfg.cluster.num_nodes)
        self.page_size = cfg.cache.page_size
        self.token_bytes = cfg.model.kv_bytes_per_token
        self.capacity_bytes = cfg.kv_capacity_bytes
        self.recorder = Recorder(cfg)
        self.nodes = [self._make_node(i) for i in range(cfg.cluster.num_nodes)]
        self.placement = make_placement(cfg, self.nodes)  # None for local_only: nothing changes
        self.router = Router(
            self.env,
            cfg.router,
            make_policy("routing", cfg.policies.routing, rng),
            self.table,
            self.nodes,
            self.page_size,
            self.capacity_bytes // self.token_bytes,
            self.token_bytes,
        )
        self._failures_in_a_row = 0  # closed loop: consecutive requests that can never fit
        self.sequences: list[Sequence] = []

    # -- construction --------------------------------------------------------------------------
    def _make_node(self, node_id: int) -> Node:
        c = self.cfg.cache
        if c.mechanism == "contiguous":
            alloc = ContiguousAllocator(self.capacity_bytes, int(c.segment_bytes))
            kv = ContiguousKV(alloc, self.token_bytes, c.max_new_tokens, c.max_model_len)
        else:
            kv = paged_kv_from_config(self.cfg, self.latency, node_id, self.make_policy)
            kv.cache.listeners.append(self.table.on_cache_event)
        return Node(self.env, node_id, self.cfg.node, kv, self.latency, self._on_finish)

    # -- running -------------------------------------------------------------------------------
    def run(self, progress=None) -> None:
        if self.workload.num_clients is None:
            self.env.process(self._open_loop(self.workload.requests))
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
        for seq in self.sequences:
            if seq.status in (Status.WAITING, Status.RUNNING):
                seq.status = Status.UNFINISHED

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
        for req in requests:
            if req.arrival_s >= self.cfg.duration_s:
                return
            if req.arrival_s > self.env.now:
                yield self.env.timeout(req.arrival_s - self.env.now)
            self.dispatch(req)

    def _client(self, client: int):
        while True:
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

    def dispatch(self, req: Request) -> Sequence:
        """Route one request to a node (or fail it at once if it can never be served)."""
        now = self.env.now
        keys = page_keys(req.prompt, self.page_size, self.cfg.cache.hash_bits)
        seq = Sequence(
            req=req, keys=keys, arrival_s=now if req.arrival_s is None else req.arrival_s
        )
        self.sequences.append(seq)
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
        if self.placement is not None:  # pages may live on other nodes too
            return self.placement.can_ever_fit(seq)
        c, node = self.cfg.cache, self.nodes[0]
        total = seq.prompt_tokens + seq.req.output_tokens
        usable = node.kv.capacity_tokens() - node.headroom_tokens
        if c.mechanism == "contiguous":
            return total <= c.max_model_len and node.kv.reservation_tokens(seq) <= usable
        if c.protected_zone:  # the zone may hold its cap of pages that are never evicted
            usable -= int(c.protected_max_fraction * node.kv.capacity_tokens())
        return -(-total // self.page_size) * self.page_size <= usable

    def _on_finish(self, seq: Sequence) -> None:
        seq.drop_tokens()
        if seq.done is not None and not seq.done.triggered:
            seq.done.succeed()
