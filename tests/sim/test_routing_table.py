"""The routing tables: exact prefix walks, agreement with the nodes' caches, approximate trees."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cluster import Cluster
from sim.routing_table import ApproxPrefixTable, RoutingTable, longest_prefix, longest_prefix_linear
from tests.helpers import prefix_affinity_cluster


def keys(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def test_matched_pages_gives_each_node_its_longest_cached_prefix():
    table = RoutingTable(3)
    table.on_cache_event("stored", [1, 2, 3], 0)
    table.on_cache_event("stored", [1, 2], 1)
    table.on_cache_event("stored", [7, 8], 2)  # another prompt: node 2 matches nothing
    assert table.matched_pages(keys(1, 2, 3, 4)).tolist() == [3, 2, 0]
    table.on_cache_event("removed", [3, 2], 0)  # node 0 evicts a subtree: one page left
    assert table.matched_pages(keys(1, 2, 3, 4)).tolist() == [1, 2, 0]
    assert table.nodes_holding(1) == [0, 1] and table.nodes_holding(3) == []
    table.on_cache_event("removed", [1], 0)
    table.on_cache_event("removed", [2, 1], 1)
    assert 1 not in table.key_to_nodes and 2 not in table.key_to_nodes  # no holder left
    assert table.matched_pages(keys()).tolist() == [0, 0, 0]


def test_linear_walk_stops_at_a_gap():
    table = RoutingTable(2)
    table.on_cache_event("stored", [1, 3], 0)  # not prefix-closed: page 2 missing
    assert longest_prefix_linear(table.key_to_nodes, keys(1, 2, 3), 2).tolist() == [1, 0]


chains = st.lists(st.integers(1, 6), min_size=1, max_size=5)
events = st.lists(
    st.tuples(st.sampled_from(["stored", "removed"]), st.integers(0, 3), chains), max_size=40
)


@settings(max_examples=200, deadline=None)
@given(events, chains)
def test_linear_walk_equals_a_per_node_set_model(evs, query):
    table, held = RoutingTable(4), [set() for _ in range(4)]
    for event, node, ks in evs:
        table.on_cache_event(event, ks, node)
        held[node] = held[node] | set(ks) if event == "stored" else held[node] - set(ks)
    expected = []
    for node in range(4):
        depth = 0
        while depth < len(query) and query[depth] in held[node]:
            depth += 1
        expected.append(depth)
    assert (
        longest_prefix_linear(table.key_to_nodes, np.array(query, dtype=np.uint64), 4).tolist()
        == expected
    )
    for key, mask in table.key_to_nodes.items():
        assert mask and mask == sum(1 << n for n in range(4) if key in held[n])


paths = st.lists(st.integers(0, 2), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3), paths), max_size=40), paths)
def test_bisection_equals_the_linear_walk_on_prefix_closed_tables(steps, query):
    """Caches store whole root paths and evict a page with its subtree: the table stays prefix-closed."""
    table, key_of = RoutingTable(4), {}

    def key(prefix):
        return key_of.setdefault(prefix, len(key_of) + 1)

    for store, node, path in steps:
        prefixes = [tuple(path[: d + 1]) for d in range(len(path))]
        if store:
            table.on_cache_event("stored", [key(p) for p in prefixes], node)
        else:  # evict the path's last page and everything below it
            cut = prefixes[-1]
            table.on_cache_event(
                "removed", [k for p, k in key_of.items() if p[: len(cut)] == cut], node
            )
    query_keys = np.array([key(tuple(query[: d + 1])) for d in range(len(query))], dtype=np.uint64)
    expected = longest_prefix_linear(table.key_to_nodes, query_keys, 4).tolist()
    assert longest_prefix(table.key_to_nodes, query_keys, 4).tolist() == expected


def small_cluster() -> Cluster:
    """Two Llama-3-8B nodes with a ~400-page KV pool each: random prompts force evictions."""
    return prefix_affinity_cluster(nodes=2, clients=6, duration_s=40)


def cached_keys(node) -> set[int]:
    index = node.kv.cache.index
    return set(index.page_key[index.indexed].tolist())


def test_routing_table_matches_the_caches_through_evictions():
    cluster = small_cluster()
    checks = []

    def check(t):
        truth = {}
        for node in cluster.nodes:
            for key in cached_keys(node):
                truth[key] = truth.get(key, 0) | 1 << node.node_id
        checks.append(truth == cluster.table.key_to_nodes)
        for node in cluster.nodes:  # the caches are prefix-closed: bisection = page-by-page walk
            for seq in [*node.waiting, *node.running]:
                table = cluster.table.key_to_nodes
                assert (
                    longest_prefix(table, seq.keys, 2) == longest_prefix_linear(table, seq.keys, 2)
                ).all()

    cluster.run(progress=check)
    evicted = sum(node.kv.cache.num_evicted_pages for node in cluster.nodes)
    assert evicted > 1000  # the pools turned over several times
    assert len(checks) == 40 and all(checks)


def test_approx_table_inserts_match_and_trim_leaves_first():
    table = ApproxPrefixTable(2)
    table.insert(keys(1, 2, 3), 0)
    table.insert(keys(1, 2, 4, 5), 0)
    table.insert(keys(1, 9), 1)
    assert table.matched_pages(keys(1, 2, 4, 5, 6)).tolist() == [4, 1]
    assert [table.num_pages(0), table.num_pages(1)] == [5, 2]
    assert table.trim(0, 3) == 2  # 3 (the older leaf) and 5 go; 4's parent 2 stays
    assert table.matched_pages(keys(1, 2, 4)).tolist() == [3, 1]
    assert table.matched_pages(keys(1, 2, 3)).tolist() == [2, 1]
    assert table.trim(1, 0) == 2 and 9 not in table.key_to_nodes and table.key_to_nodes[1] == 1


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),
            st.lists(st.integers(0, 2), min_size=1, max_size=5),
            st.integers(0, 6),
        ),
        max_size=30,
    )
)
def test_approx_table_stays_prefix_closed_and_consistent(steps):
    """Prompts are paths in a small tree; a page's key names its whole prefix (as chained keys do)."""
    table, key_of = ApproxPrefixTable(3), {}
    for node, path, cap in steps:
        prefixes = [tuple(path[: d + 1]) for d in range(len(path))]
        for prefix in prefixes:
            key_of.setdefault(prefix, len(key_of) + 1)
        prefix_of = {k: p for p, k in key_of.items()}
        table.insert(np.array([key_of[p] for p in prefixes], dtype=np.uint64), node)
        table.trim(node, cap)
        assert table.num_pages(node) <= cap
        for n in range(3):
            held = {prefix_of[k] for k in table.node_keys[n]}
            assert all(p[:-1] in held for p in held if len(p) > 1)  # prefix-closed
            assert set(table.node_keys[n]) == {
                k for k, mask in table.key_to_nodes.items() if mask >> n & 1
            }
