"""KV placement across nodes: which node holds each page of a request.

  local_only  every page on the request's node (today's behaviour; no Placement object exists).
  spill       pages stay local while the node keeps its admission headroom; the overflow goes to
              the peer with the most available pages (free + evictable), then the next one.
  shard       a long context is striped over k nodes: stripes of `stripe_pages` consecutive pages
              rotate over the owner and the k-1 peers with the most available pages (a stripe
              page whose member is full goes to the node with the most room instead).
Only prompts of at least `min_prompt_tokens` leave their node; the others behave as local_only.

Remote pages are fetched before the step that reads them (we do not compute attention remotely
and merge partial results): every step of a request reads its whole context, so the remote part
crosses the network every step, and KV computed into remote pages is written back. The step
waits for that transfer (sim/page_traffic.py gathers it, sim/network.py prices it), which is
what makes the transfer mode matter.
Pages a node hosts for a peer's request stay pinned (USED) until the owner frees them; KV usage
counts every page on the pool that holds it (hosted pages are allocated and live there).

A sequence that ever places a page away from its node gets a Record: its leading local pages stay
in `seq.pages` (the prefix index sees only those); every later logical page is (node, page id) in
the record, local ones included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sim.kv.manager import KVUsage, PagedKV
from sim.kv.protocol import CacheCounters, headroom_tokens
from sim.policy_api import PlacementStrategy
from sim.sequence import Sequence, Status
from sim.xnode.network import Network
from sim.xnode.page_traffic import PageTraffic

if TYPE_CHECKING:
    from sim.config import ExperimentConfig


@dataclass(slots=True)
class Record:
    owner: int
    lead: int  # logical pages held in seq.pages (fixed once the tail has a page)
    nodes: list[int] = field(default_factory=list)  # node of logical page lead + i
    pages: list[int] = field(default_factory=list)  # page id on that node
    members: tuple[int, ...] = ()  # shard: nodes the stripes rotate over, owner first
    arrays: tuple[np.ndarray, np.ndarray] | None = None  # cached np views of nodes/pages
    went_remote: bool = False
    peers: list[int] = field(default_factory=list)  # nodes other than the owner holding its pages
    index_cache: dict[int, tuple[int, int]] = field(default_factory=dict)  # peer -> (m, bytes)
    decode_steps: int = 0  # decode steps that waited for remote pages
    decode_transfer_s: float = 0.0  # ... and how long, in total
    decode_wire_s: float = 0.0  # ... and the bandwidth bound of the same bytes

    def as_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self.arrays is None or self.arrays[0].shape[0] != len(self.nodes):
            self.arrays = (
                np.array(self.nodes, dtype=np.int64),
                np.array(self.pages, dtype=np.int64),
            )
        return self.arrays


class Placement:
    def __init__(
        self,
        cfg: ExperimentConfig,
        kvs: list[PagedKV],
        clock: Callable[[], float],
        wake: Callable[[int], None],
        strategy: PlacementStrategy,
    ):
        """`kvs`: each node's own paged manager; `clock()`: now; `wake(node)`: a node asleep
        retries its waiting head (memory came back on it); `strategy`: where pages go."""
        self.cfg = cfg.placement
        self.strategy = strategy
        self.kvs = kvs
        self.num_nodes = len(kvs)
        self.clock = clock
        self.wake_node = wake
        self.page_size = cfg.cache.page_size
        self.token_bytes = cfg.model.kv_bytes_per_token
        # The node's admission headroom (sim/kv/protocol.py), out of reach of placement too.
        self.headroom_tokens = headroom_tokens(
            cfg.node.admission_watermark, self.kvs[0].capacity_tokens()
        )
        self.reserve_pages = -(-self.headroom_tokens // self.page_size)
        lanes = min(cfg.node.tp, cfg.network.nics_per_node or cfg.node.num_gpus)
        self.network = Network(
            cfg.network, len(kvs), lanes, self.page_size, self.token_bytes, cfg.model.num_layers
        )
        self.records: dict[Sequence, Record] = {}
        self.traffic = PageTraffic(self.page_size, self.network, self.records)
        self.out_pages = [0] * len(kvs)  # pages of this node's requests held by peers
        self.hosted_pages = [0] * len(kvs)  # pages this node holds for peers' requests
        self.blocked: set[int] = set()  # owners whose request did not fit on its nodes
        # Requests whose pages did not fit, by age: younger ones take no new pages until they do
        # (a cluster-wide oldest-first rule; without it two owners can preempt each other forever).
        self.starving: dict[Sequence, tuple[float, int]] = {}
        self._to_wake: set[int] = set()
        self._waking = False
        self.remote_requests: set[int] = set()  # request ids that ever held a page on a peer
        self.decode_totals = np.zeros(
            3
        )  # finished placed requests: decode steps, transfer s, wire s
        self.remote_pages_peak = 0

    # -- decisions -----------------------------------------------------------------------------
    def eligible(self, seq: Sequence) -> bool:
        return seq.prompt_tokens >= self.cfg.min_prompt_tokens

    def room(self, node: int) -> int:
        """Pages placement may take on a node now (free + evictable now) minus the admission headroom."""
        return max(0, self.kvs[node].cache.takeable_pages(self.clock()) - self.reserve_pages)

    def _by_room(self, exclude: int) -> list[int]:
        """Peers, most available pages first (ties: lower id)."""
        return sorted(
            (p for p in range(self.num_nodes) if p != exclude), key=lambda p: (-self.room(p), p)
        )

    def targets(self, rec: Record, first: int, need: int) -> list[int] | None:
        """Node of each logical page first .. first+need-1, or None if they do not fit."""
        room = [self.room(n) for n in range(self.num_nodes)]
        prefer = self.strategy.preferred_nodes(
            rec.owner, rec.members, first, need, room, self._by_room(rec.owner)
        )
        out = []
        for n in prefer:
            if not room[n]:  # full: the node with the most room left takes the page instead
                n = max(range(len(room)), key=lambda p: (room[p], -p))
                if not room[n]:
                    return None
            room[n] -= 1
            out.append(n)
        return out if len(out) == need else None

    def _new_record(self, owner: int, seq: Sequence) -> Record:
        members = self.strategy.members(owner, self._by_room(owner))
        return Record(owner=owner, lead=len(seq.pages), members=members)

    # -- mechanism -----------------------------------------------------------------------------
    def grow(self, owner: int, seq: Sequence, num_tokens: int, now: float) -> bool:
        rec = self.records.get(seq)
        need_total = -(-(seq.num_computed + num_tokens) // self.page_size)
        inner = self.kvs[owner]
        if rec is None:
            fits_locally = self.strategy.keep_local_when_it_fits and need_total - len(
                seq.pages
            ) <= self.room(owner)
            if not self.eligible(seq) or fits_locally:
                return inner.grow(seq, num_tokens, now)
            if seq.status is Status.WAITING and inner.free_tokens() < self.headroom_tokens:
                return False  # the node admits nothing below its watermark: place nothing either
            rec = self._new_record(owner, seq)
        need = need_total - len(seq.pages) - len(rec.nodes)
        if need <= 0:
            return inner.grow(seq, num_tokens, now) if not rec.nodes else True
        age = (seq.arrival_s, seq.req.request_id)
        if self.starving and min(self.starving.values()) < age:
            self.blocked.add(owner)  # an older request waits for room: it goes first
            return False
        nodes = self.targets(rec, len(seq.pages) + len(rec.nodes), need)
        if nodes is None and self._reclaim_exited(now):
            nodes = self.targets(rec, len(seq.pages) + len(rec.nodes), need)
        if nodes is None:
            self.starving[seq] = age
            self.blocked.add(owner)  # retried when memory comes back anywhere
            return False
        self.starving.pop(seq, None)
        if (
            not rec.nodes
        ):  # no tail yet: leading local pages join seq.pages (the prefix index sees them)
            lead = next((i for i, n in enumerate(nodes) if n != owner), len(nodes))
            local_tokens = (
                num_tokens
                if lead == len(nodes)
                else (len(seq.pages) + lead) * self.page_size - seq.num_computed
            )
            if lead and not inner.grow(seq, local_tokens, now):
                return False  # room() promised these pages; never run a request without its KV
            nodes = nodes[lead:]
            rec.lead = len(seq.pages)
        self._allocate(rec, seq, nodes, now)
        return True

    def _reclaim_exited(self, now: float) -> int:
        """Short of memory: retired pages whose readers exited are garbage on every node (as the
        cache's own allocate does locally)."""
        return sum(
            kv.cache.pool.reclaim_exited(now) for kv in self.kvs if kv.cache.pool.num_retired
        )

    def _take(self, node: int, count: int, now: float) -> list[int]:
        pages = self.kvs[node].cache.allocate(count, now)
        assert pages is not None  # the caller checked the room on this node
        return pages

    def _allocate(self, rec: Record, seq: Sequence, nodes: list[int], now: float) -> None:
        """Pages on `nodes` (room checked) become the next logical pages of the record's tail."""
        self.records[seq] = rec
        if not nodes:
            return
        counts = np.bincount(np.asarray(nodes, dtype=np.int64), minlength=self.num_nodes)
        new_pages = {n: iter(self._take(n, int(c), now)) for n, c in enumerate(counts) if c}
        for n in nodes:
            rec.nodes.append(n)
            rec.pages.append(int(next(new_pages[n])))
        remote = len(nodes) - int(counts[rec.owner])
        self.out_pages[rec.owner] += remote
        for n, c in enumerate(counts.tolist()):
            if n != rec.owner and c:
                self.hosted_pages[n] += c
                if n not in rec.peers:
                    rec.peers = sorted([*rec.peers, n])
        if remote and not rec.went_remote:
            rec.went_remote = True
            self.remote_requests.add(seq.req.request_id)
        self.remote_pages_peak = max(self.remote_pages_peak, sum(self.out_pages))

    def free(self, owner: int, seq: Sequence) -> None:
        ran = seq.status is Status.RUNNING  # else an admission that failed: it held nothing new
        rec = self.records.pop(seq, None)
        self.kvs[owner].free(seq)
        if rec is not None:
            if seq.num_generated >= seq.req.output_tokens:  # finished: its tokens count
                self.decode_totals += (rec.decode_steps, rec.decode_transfer_s, rec.decode_wire_s)
            nodes, pages = rec.as_arrays()
            for n in np.unique(nodes).tolist():
                self.kvs[n].cache.release(pages[nodes == n][::-1].tolist(), seq.last_read_s)
                if n != owner:
                    moved = int((nodes == n).sum())
                    self.out_pages[owner] -= moved
                    self.hosted_pages[n] -= moved
                    self._wake(n)  # a host asleep reclaims the pages now
        if ran:
            self.wake_blocked(owner)

    def wake_blocked(self, source: int) -> None:
        """Memory came back on `source`: other owners that could not place a request try again
        (`source` itself retries in its own loop)."""
        owners = self.blocked - {source}
        self.blocked -= owners
        for owner in sorted(owners):
            self._wake(owner)

    def _wake(self, node: int) -> None:
        """Node.wake, never re-entered: a wake that reclaims pages may ask to wake others."""
        self._to_wake.add(node)
        if self._waking:
            return
        self._waking = True
        try:
            while self._to_wake:
                n = min(self._to_wake)
                self._to_wake.discard(n)
                self.wake_node(n)
        finally:
            self._waking = False

    def on_computed(self, owner: int, seq: Sequence, num_tokens: int, now: float) -> None:
        if seq not in self.records:
            self.kvs[owner].on_computed(seq, num_tokens, now)
            return
        # The prefix index addresses seq.pages by position: it sees only the leading local run.
        indexable = min(seq.num_computed, len(seq.pages) * self.page_size)
        self.kvs[owner].on_computed(seq, num_tokens, now, indexable_tokens=indexable)

    # -- what the cluster and the metrics ask ------------------------------------------------
    def can_ever_fit(self, seq: Sequence) -> bool:
        pages = -(-(seq.prompt_tokens + seq.req.output_tokens) // self.page_size)
        per_node = self.kvs[0].cache.pool.num_pages - self.reserve_pages
        if not self.eligible(seq):
            return pages <= self.kvs[0].cache.pool.num_pages
        return self.strategy.busiest_node_pages(pages, self.num_nodes) <= per_node

    def summary(self, duration_s: float) -> dict:
        steps, transfer_s, wire_s = self.decode_totals.tolist()
        return {
            **self.traffic.summary(duration_s),
            "remote_decode_steps": int(steps),
            "remote_decode_transfer_ms": transfer_s / steps * 1e3 if steps else math.nan,
            "remote_decode_wire_ms": wire_s / steps * 1e3 if steps else math.nan,
            "remote_requests": len(self.remote_requests),
            "remote_pages_peak": self.remote_pages_peak,
        }


class PlacedKV:
    """A node's KV manager whose requests may hold pages on peers; placement decides where."""

    def __init__(self, inner: PagedKV, node_id: int, placement: Placement):
        self.inner, self.node_id, self.placement = inner, node_id, placement

    def admit(self, seq: Sequence, now: float) -> bool:
        return self.inner.admit(seq, now)

    def commit(self, seq: Sequence, now: float) -> None:
        self.inner.commit(seq, now)

    def oom_action(self, seq: Sequence) -> str:
        return self.inner.oom_action(seq)

    def reset(self) -> None:
        self.inner.reset()

    def grow(self, seq: Sequence, num_tokens: int, now: float) -> bool:
        return self.placement.grow(self.node_id, seq, num_tokens, now)

    def on_computed(self, seq: Sequence, num_tokens: int, now: float) -> None:
        self.placement.on_computed(self.node_id, seq, num_tokens, now)

    def free(self, seq: Sequence) -> None:
        self.placement.free(self.node_id, seq)

    def end_step(self, now: float) -> int:
        freed = self.inner.end_step(now)
        if freed:
            self.placement.wake_blocked(self.node_id)
        return freed

    def idle_reclaim(self, now: float) -> float | None:
        wait_s = self.inner.idle_reclaim(now)
        if wait_s == 0.0:  # pages came back
            self.placement.wake_blocked(self.node_id)
        return wait_s

    def free_tokens(self) -> int:
        return self.inner.free_tokens()

    def capacity_tokens(self) -> int:
        return self.inner.capacity_tokens()

    def used_tokens(self) -> int:
        return self.inner.used_tokens()

    def usage(self) -> KVUsage:
        return self.inner.usage()

    def counters(self) -> CacheCounters:
        return self.inner.counters()

    def can_ever_fit(self, seq: Sequence, headroom_tokens: int) -> bool:
        return self.placement.can_ever_fit(seq)


def make_placement(
    cfg: ExperimentConfig,
    kvs: list[PagedKV],
    clock: Callable[[], float],
    wake: Callable[[int], None],
    strategy: PlacementStrategy | None,
) -> Placement | None:
    """Cross-node placement over the nodes' paged managers; None for local_only (no strategy)."""
    if strategy is None:
        return None
    return Placement(cfg, kvs, clock, wake, strategy)
