"""Network model: exact prices of tiny transfers in each mode, port contention, utilisation."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import NetworkConfig
from sim.xnode.network import LINK_PRESETS, Network
from sim.xnode.page_index_codec import encoded_size

# 1 lane, pages of 4 tokens x 64 bytes = 256 bytes, 2 layers: a page slice is 128 bytes and a
# 256-byte message holds two slices. 1000 B/s, 1 s latency: the arithmetic stays readable.
LINK = {"bandwidth_bytes_per_s": 1000.0, "latency_s": 1.0, "max_message_bytes": 256}


def make_net(mode: str, num_nodes: int = 3, **link) -> Network:
    cfg = NetworkConfig(
        link={**LINK, **link},
        mode=mode,
        kernel_message_s=2.0,
        kernel_copy_bytes_per_s=100.0,
        rdma_post_s=0.01,
    )
    return Network(cfg, num_nodes=num_nodes, lanes=1, page_size=4, token_bytes=64, num_layers=2)


PAGES = np.array([9, 5, 7, 6])  # on peer 1: runs [5, 6, 7] and [9]
READS = {1: (PAGES, 16)}  # 16 tokens = 1024 bytes
INDEX_BYTES = encoded_size({1: PAGES})


def test_index_of_four_pages_is_eight_bytes():
    # magic, 1 node, node id, 1 chunk, chunk header, bitmap: base 5, nbits-1 = 4, one byte.
    assert INDEX_BYTES == 8


def test_naive_pays_a_round_trip_and_kernel_cpu_per_page_slice():
    net = make_net("naive")
    assert net.message_count(PAGES) == 8  # 4 pages x 2 layers
    cost = net.price(READS, {})
    assert cost.handshake_s == 0 and cost.index_bytes == 0
    assert cost.message_s == pytest.approx(8 * (2 * 1.0 + 2.0))
    assert cost.byte_s == pytest.approx(1024 / 100)  # the kernel copy is slower than the wire
    assert cost.data_s == pytest.approx(32 + 10.24)
    assert cost.wire_s == pytest.approx(1.024)


def test_batched_async_sends_the_index_then_pipelines_contiguous_reads():
    net = make_net("batched_async")
    assert net.message_count(PAGES) == 6  # per layer: run of 3 slices -> 2 messages, run of 1 -> 1
    cost = net.price(READS, {})
    assert cost.index_bytes == 8
    assert cost.handshake_s == pytest.approx(1 * (2 * 1.0 + 2.0) + 8 / 1000)
    assert cost.data_s == pytest.approx(1.0 + (6 * 2.0 + 1024 / 100))


def test_rdma_is_bound_by_the_wire():
    net = make_net("rdma")
    cost = net.price(READS, {})
    assert cost.handshake_s == pytest.approx(2 * 1.0 + 0.01 + 8 / 1000)
    assert cost.message_s == pytest.approx(6 * 0.01)
    assert cost.data_s == pytest.approx(1.0 + 1024 / 1000)


def test_an_index_larger_than_one_message_takes_several_round_trips():
    net = make_net("rdma", max_message_bytes=3)
    assert net.price(READS, {}).handshake_s == pytest.approx(3 * (2 * 1.0 + 0.01) + 8 / 1000)


def test_reads_and_writes_share_the_index_and_overlap_on_the_wire():
    net = make_net("rdma")
    cost = net.price(READS, {2: (np.array([0]), 1)})
    assert cost.index_bytes == INDEX_BYTES + encoded_size({2: [0]})
    assert (cost.read_bytes, cost.write_bytes) == (1024, 64)
    assert cost.wire_s == pytest.approx(1.024)  # full duplex: the larger direction


def test_second_reader_of_one_peer_waits_for_its_port():
    net = make_net("rdma")
    first = net.transfer(0, READS, {}, now=0.0)
    second = net.transfer(2, READS, {}, now=0.0)
    assert first == pytest.approx(2.018 + 2.024)
    assert second - first == pytest.approx(1.024)  # peer 1's egress was busy for 1024 B / 1000 B/s
    t = net.totals
    assert (t.num_transfers, t.read_bytes, t.wait_s) == (2, 2048, pytest.approx(1.024))
    util = net.utilization(duration_s=10.0)  # [node, (rx, tx)]
    np.testing.assert_allclose(util, [[0.1024, 0], [0, 0.2048], [0.1024, 0]])


def test_transfers_after_the_port_frees_do_not_wait():
    net = make_net("rdma")
    net.transfer(0, READS, {}, now=0.0)
    net.transfer(2, READS, {}, now=100.0)
    assert net.totals.wait_s == 0


def test_modes_order_on_a_page_heavy_read():
    pages = np.arange(512)
    reads = {1: (pages, 512 * 4)}
    times = {m: make_net(m).price(reads, {}) for m in ("naive", "batched_async", "rdma")}
    total = {m: c.handshake_s + c.data_s for m, c in times.items()}
    assert total["naive"] > total["batched_async"] > total["rdma"] >= times["rdma"].wire_s


def test_presets_are_the_documented_figures():
    assert LINK_PRESETS["rdma-400g"]["bandwidth_bytes_per_s"] == 400e9 / 8
    assert LINK_PRESETS["nvlink"]["bandwidth_bytes_per_s"] == 450e9
    assert NetworkConfig().link.max_message_bytes == 64 * 1024
