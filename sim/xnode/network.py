"""Network model for cross-node KV pages: links, per-message costs and three transfer modes.

A node reads (and writes) remote KV pages over its NICs, one lane per tensor-parallel rank: each
rank moves its own KV heads' share of every page, in parallel. The unit the page table addresses
is a *page slice*: one page of one layer on one lane (K and V). Three ways to move them, as the
article describes:
  naive          one request/response per page slice through the kernel TCP stack: every slice
                 pays a round trip plus the kernel's per-message CPU, and one core per lane copies
                 the bytes through kernel buffers.
  batched_async  the page index first (the codec's bytes, in as many messages as the limit needs),
                 then pipelined reads of up to max_message_bytes of contiguous remote pages each;
                 still through the kernel: per-message CPU and the copy remain, round trips go.
  rdma           the same index handshake, then one-sided RDMA reads/writes (GPUDirect): the NIC
                 moves the bytes, the CPU only posts work requests; the wire is the limit.
Links are FIFO per node and direction: the data of a transfer starts when the reader's port and
each peer's port are free (readers contending for one peer wait; the last one finishes when fair
sharing would finish it too). The step that needs the pages waits for the whole transfer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sim.xnode.page_index_codec import encoded_size

if TYPE_CHECKING:
    from sim.config import NetworkConfig

# Link presets: one NIC (or NVLink port) per lane; bandwidth per direction.
LINK_PRESETS: dict[str, dict] = {
    # NVIDIA ConnectX-7: 400 Gb/s InfiniBand NDR / Ethernet per port (datasheet) = 50 GB/s line
    # rate; DGX H100/H200 pair one ConnectX-7 with each GPU. ~2 us one way for a small message
    # across one switch (perftest ib_send_lat / ib_read_lat class on NDR). Message limit 64 KiB:
    # the slice Mooncake's transfer engine cuts batched transfers into (GlobalConfig.slice_size).
    "rdma-400g": dict(bandwidth_bytes_per_s=50e9, latency_s=2e-6, max_message_bytes=65536),
    # NVLink 4 on H100/H200: 18 links x 50 GB/s = 900 GB/s per GPU, 450 GB/s each way (NVIDIA
    # H200 datasheet); ~1 us class through an NVLink switch. Same 64 KiB slicing.
    "nvlink": dict(bandwidth_bytes_per_s=450e9, latency_s=1e-6, max_message_bytes=65536),
}
# Kernel TCP path. netperf TCP_RR round trips on 100 GbE hosts are ~25 us class while the wire
# takes ~2-4 us: ~10 us of kernel send + receive work (syscalls, protocol, interrupt, wake-up)
# per message, both hosts together.
KERNEL_MESSAGE_S = 10e-6
# One core copies at most ~42 Gb/s of a long TCP flow; the receive-side copy is the bottleneck
# (Cai et al., "Understanding Host Network Stack Overheads", SIGCOMM 2021).
KERNEL_COPY_BYTES_PER_S = 42e9 / 8
# RDMA: posting one work request (a WQE write; doorbells batched) is ~0.1 us of CPU; the NIC's
# message rate (hundreds of millions per second on ConnectX-7) is not the limit at 64 KiB.
RDMA_POST_S = 0.1e-6

Flow = tuple[np.ndarray, int]  # (page ids on the peer, KV tokens those pages hold or receive)


@dataclass(slots=True)
class Port:
    """One node's NICs, per direction: when each is next free, and what it carried."""

    rx_free_s: float = 0.0
    tx_free_s: float = 0.0
    rx_bytes: float = 0.0
    tx_bytes: float = 0.0


@dataclass(slots=True)
class Cost:
    """One transfer on an idle network. Seconds are per lane (lanes run in parallel)."""

    handshake_s: float
    message_s: float
    byte_s: float
    data_s: float  # after the handshake, until the last byte lands
    wire_s: float
    messages: int
    index_bytes: int
    read_bytes: float  # whole node
    write_bytes: float


@dataclass(slots=True)
class TransferTotals:
    """Sums over every transfer (seconds are step time spent waiting for pages)."""

    num_transfers: int = 0
    read_bytes: float = 0.0
    write_bytes: float = 0.0
    messages: int = 0  # per lane
    index_bytes: int = 0
    handshake_s: float = 0.0  # sending the page index
    message_s: float = 0.0  # per-message costs: round trips, kernel CPU, work-request posts
    byte_s: float = 0.0  # per-byte costs: kernel copy (kernel modes) or the wire
    wait_s: float = 0.0  # queued behind other transfers on a port
    transfer_s: float = 0.0  # all of it, as added to step times
    wire_s: float = 0.0  # the bandwidth bound: bytes / link bandwidth


@dataclass
class Network:
    cfg: NetworkConfig
    num_nodes: int
    lanes: int  # parallel NICs a node reads with (one per tensor-parallel rank)
    page_size: int  # tokens per page
    token_bytes: int  # KV bytes per token, all layers, whole node
    num_layers: int
    ports: list[Port] = field(init=False)
    totals: TransferTotals = field(init=False, default_factory=TransferTotals)
    last_cost: Cost | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.ports = [Port() for _ in range(self.num_nodes)]
        self.lane_token_bytes = self.token_bytes / self.lanes
        self.slice_bytes = self.page_size * self.lane_token_bytes / self.num_layers
        link = self.cfg.link
        self.slices_per_message = max(1, link.max_message_bytes // math.ceil(self.slice_bytes))
        self.messages_per_slice = math.ceil(self.slice_bytes / link.max_message_bytes)

    # -- pricing (pure: no port state) ---------------------------------------------------------
    def message_count(self, pages: np.ndarray) -> int:
        """Messages one lane needs to move these pages, all layers."""
        if pages.shape[0] == 0:
            return 0
        if self.cfg.mode == "naive":
            return int(pages.shape[0]) * self.num_layers * self.messages_per_slice
        ids = np.sort(pages)
        run_start = np.flatnonzero(np.r_[True, np.diff(ids) != 1])
        run_len = np.diff(np.r_[run_start, ids.shape[0]])  # contiguous remote pages: one read
        if self.messages_per_slice == 1:
            per_layer = -(-run_len // self.slices_per_message)
        else:
            per_layer = run_len * self.messages_per_slice
        return int(per_layer.sum()) * self.num_layers

    def handshake_s(self, index_bytes: dict[int, int]) -> float:
        """Send each peer the index of its pages, in parallel: the slowest peer's seconds."""
        if self.cfg.mode == "naive":
            return 0.0
        link, worst = self.cfg.link, 0.0
        per_message = (
            self.cfg.kernel_message_s if self.cfg.mode == "batched_async" else self.cfg.rdma_post_s
        )
        for nbytes in index_bytes.values():
            num = math.ceil(nbytes / link.max_message_bytes)
            worst = max(
                worst,
                num * (2 * link.latency_s + per_message) + nbytes / link.bandwidth_bytes_per_s,
            )
        return worst

    def index_bytes(self, reads: dict[int, Flow], writes: dict[int, Flow]) -> dict[int, int]:
        """Encoded page index per peer (the codec's bytes); none in naive mode."""
        if self.cfg.mode == "naive":
            return {}
        return {
            p: encoded_size(
                {p: np.concatenate([f[0] for f in (reads.get(p), writes.get(p)) if f is not None])}
            )
            for p in sorted({*reads, *writes})
        }

    def price(
        self,
        reads: dict[int, Flow],
        writes: dict[int, Flow],
        index_bytes: dict[int, int] | None = None,
    ) -> Cost:
        """What moving these pages costs on an idle network (per lane; lanes run in parallel).
        `index_bytes` (per peer) may come precomputed from the caller's cache."""
        cfg, link = self.cfg, self.cfg.link
        if index_bytes is None:
            index_bytes = self.index_bytes(reads, writes)
        elif cfg.mode == "naive":
            index_bytes = {}
        hs_s = self.handshake_s(index_bytes)
        read_b = sum(t for _, t in reads.values()) * self.lane_token_bytes
        write_b = sum(t for _, t in writes.values()) * self.lane_token_bytes
        n_msg = sum(self.message_count(pages) for pages, _ in [*reads.values(), *writes.values()])
        wire_s = max(read_b, write_b) / link.bandwidth_bytes_per_s  # full duplex
        if cfg.mode == "naive":  # synchronous: each slice waits for its round trip
            message_s = n_msg * (2 * link.latency_s + cfg.kernel_message_s)
            byte_s = (read_b + write_b) / min(
                cfg.kernel_copy_bytes_per_s, link.bandwidth_bytes_per_s
            )
            data_s = message_s + byte_s
        elif (
            cfg.mode == "batched_async"
        ):  # pipelined: one core's CPU work or the wire, whichever is longer
            message_s = n_msg * cfg.kernel_message_s
            byte_s = (read_b + write_b) / cfg.kernel_copy_bytes_per_s
            data_s = link.latency_s + max(message_s + byte_s, wire_s)
        else:  # rdma: the NIC moves the bytes; the CPU only posts work requests
            message_s, byte_s = n_msg * cfg.rdma_post_s, wire_s
            data_s = link.latency_s + max(message_s, wire_s)
        return Cost(
            hs_s,
            message_s,
            byte_s,
            data_s,
            wire_s,
            n_msg,
            sum(index_bytes.values()),
            read_b * self.lanes,
            write_b * self.lanes,
        )

    def transfer(
        self,
        reader: int,
        reads: dict[int, Flow],
        writes: dict[int, Flow],
        now: float,
        index_bytes: dict[int, int] | None = None,
    ) -> float:
        """Seconds before a step on `reader` may start: fetch `reads`, push `writes`."""
        cost = self.last_cost = self.price(reads, writes, index_bytes)
        wait_s = self._reserve(reader, reads, writes, now + cost.handshake_s)
        total = cost.handshake_s + wait_s + cost.data_s
        t = self.totals
        t.num_transfers += 1
        t.read_bytes += cost.read_bytes
        t.write_bytes += cost.write_bytes
        t.messages += cost.messages
        t.index_bytes += cost.index_bytes
        t.handshake_s += cost.handshake_s
        t.message_s += cost.message_s
        t.byte_s += cost.byte_s
        t.wait_s += wait_s
        t.transfer_s += total
        t.wire_s += cost.wire_s
        return total

    # -- ports ---------------------------------------------------------------------------------
    def _reserve(
        self, reader: int, reads: dict[int, Flow], writes: dict[int, Flow], ready_s: float
    ) -> float:
        """FIFO: start when every port involved is free; hold each for its bytes' wire time."""
        bw = self.cfg.link.bandwidth_bytes_per_s * self.lanes
        me = self.ports[reader]
        start = max(
            [ready_s]
            + ([me.rx_free_s] if reads else [])
            + ([me.tx_free_s] if writes else [])
            + [self.ports[p].tx_free_s for p in reads]
            + [self.ports[p].rx_free_s for p in writes]
        )
        for peers, inbound in ((reads, True), (writes, False)):
            total = 0.0
            for p, (_, tokens) in peers.items():
                nbytes = tokens * self.token_bytes
                port = self.ports[p]
                if inbound:
                    port.tx_free_s, port.tx_bytes = (
                        max(port.tx_free_s, start + nbytes / bw),
                        port.tx_bytes + nbytes,
                    )
                else:
                    port.rx_free_s, port.rx_bytes = (
                        max(port.rx_free_s, start + nbytes / bw),
                        port.rx_bytes + nbytes,
                    )
                total += nbytes
            if inbound and peers:
                me.rx_free_s, me.rx_bytes = (
                    max(me.rx_free_s, start + total / bw),
                    me.rx_bytes + total,
                )
            elif peers:
                me.tx_free_s, me.tx_bytes = (
                    max(me.tx_free_s, start + total / bw),
                    me.tx_bytes + total,
                )
        return start - ready_s

    def utilization(self, duration_s: float) -> np.ndarray:
        """Per node and direction (rx, tx): bytes carried / (bandwidth x duration)."""
        capacity = self.cfg.link.bandwidth_bytes_per_s * self.lanes * duration_s
        return np.array([[p.rx_bytes, p.tx_bytes] for p in self.ports]) / capacity
