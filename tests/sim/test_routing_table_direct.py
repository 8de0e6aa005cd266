"""A routing table that reads the nodes' level-1 slots (`RoutingTable.watch`) answers every read
as the table kept from every cache event does: the same matches at every routing decision and the
same key -> holders mapping at the end, through evictions, with colliding keys (narrow hashes:
overflow pages, from which a node's entries are kept again) and with hash-only indexes."""

from __future__ import annotations

import pytest

from sim.cluster import Cluster
from sim.routing_table import RoutingTable
from tests.helpers import prefix_affinity_cluster


def cluster_with(index: str, hash_bits: int, nodes: int) -> Cluster:
    cache = {"index": index, "hash_bits": hash_bits}
    return prefix_affinity_cluster(nodes, clients=4 * nodes, duration_s=30, cache=cache)


@pytest.mark.parametrize(
    "index, hash_bits", [("two_level", 64), ("two_level", 12), ("hash_only", 64), ("hash_only", 10)]
)
def test_reading_the_slots_answers_as_the_kept_table(index, hash_bits):
    cluster = cluster_with(index, hash_bits, 3)
    table = cluster.table
    kept = RoutingTable(table.num_nodes)  # the reference: every node kept from its events
    caches = [node.kv.cache for node in cluster.nodes]
    for cache in caches:
        table.watch(cache.node_id, cache.index)
        cache.listeners.append(kept.on_cache_event)
    assert len(table._direct) == 3
    reads = []
    matched_pages = table.matched_pages

    def read(keys):
        got = matched_pages(keys)
        want = kept.matched_pages(keys)
        reads.append(got.tolist() == want.tolist())
        return got

    table.matched_pages = read  # type: ignore[method-assign]
    cluster.run()
    assert reads and all(reads)
    assert dict(table.key_to_nodes.items()) == kept.key_to_nodes
    assert sum(c.num_evicted_pages for c in caches) > 0
    if hash_bits < 64 and index == "two_level":
        assert any(c.index.overflow_used for c in caches) and len(table._direct) < 3
