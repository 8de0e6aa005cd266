"""Decode spans that fill pages the prefix index stores (sim/node.py, PagedKV.advance_decodes):
the default driver indexes them when the span is brought up to date, at their own step's end
time and in their own order. Whoever looks at a node's cache (through `node.kv`) or at the
routing table's entries for a prompt's pages (the router, through `Node.sync_index`) sees what
the step-by-step reference holds at that moment: the index, its eviction statistics, the pool
and the table are compared both ways at probe times through the run, the table's entries at
every read, and the requests at the end."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsched.experiment import resolve_arms
from policies import make_policy
from sim.cluster import Cluster
from sim.config import ConfigError
from sim.node import Node
from workloads.registry import make_workload

PROBE_S = 0.0731  # a probe's period: off the step grid, so probes land inside spans
SEQ_FIELDS = ("node", "status", "num_computed", "num_generated", "cached_tokens", "preemptions")
SEQ_FIELDS += ("first_token_s", "finish_s", "stored_pages", "use_after_free", "false_hits")
SEQ_FIELDS += ("queued_step", "scheduled_s")


def cache_digest(cluster: Cluster) -> str:
    """Every node's index, eviction statistics and pool, and the routing table."""
    h = hashlib.sha256()
    for node in cluster.nodes:
        cache = node.kv.cache  # brings a span up to date
        index, stats, pool = cache.index, cache.stats, cache.pool
        for a in (index.page_key, index.parent, index.depth, index.indexed, index.prefix_pages):
            h.update(np.ascontiguousarray(a).tobytes())
        for a in (stats.last_access_s, stats.created_s, stats.hit_count):
            h.update(a.tobytes())
        for a in (pool.state, pool.ref_count, pool.read_until_s, pool.release_epoch):
            h.update(a.tobytes())
        h.update(repr(sorted(getattr(index, "key_to_page", {}).items())).encode())
        h.update(repr(sorted(getattr(index, "overflow", {}).items())).encode())
    h.update(repr(sorted(cluster.table.key_to_nodes.items())).encode())
    return h.hexdigest()


def run_probed(
    raw: dict, arm: str, exact: bool, probes: bool
) -> tuple[list[str], list[tuple], int]:
    """Digests of the caches at every probe and of the routing table at every read of it."""
    cfg = resolve_arms({**raw, "exact_steps": exact}, [arm])[arm]
    workload = make_workload(cfg.workload.name, cfg.workload.params, np.random.default_rng(7))
    cluster = Cluster(cfg, workload, np.random.default_rng(cfg.seed), make_policy)
    digests: list[str] = []
    table, matched_pages = cluster.table, cluster.table.matched_pages

    def read_table(keys):  # the router reads the table's entries for these keys
        holders = table.key_to_nodes.get
        digests.append(repr([holders(key, 0) for key in keys.tolist()]))
        return matched_pages(keys)

    table.matched_pages = read_table  # type: ignore[method-assign]

    def probe(env):
        while True:
            yield env.timeout(PROBE_S)
            digests.append(cache_digest(cluster))

    if probes:
        cluster.env.process(probe(cluster.env))
    cluster.run()
    digests.append(cache_digest(cluster))
    seqs = [tuple(getattr(s, f) for f in SEQ_FIELDS) for s in cluster.sequences]
    return digests, seqs, sum(n.num_span_steps for n in cluster.nodes)


def assert_same_both_ways(raw: dict, arm: str, probes: bool = True) -> int:
    """Returns the default driver's steps inside spans."""
    ref_digests, ref_seqs, ref_spans = run_probed(raw, arm, True, probes)
    digests, seqs, spans = run_probed(raw, arm, False, probes)
    assert ref_spans == 0
    assert len(digests) == len(ref_digests)
    first_diff = next(
        (i for i, (a, b) in enumerate(zip(digests, ref_digests, strict=True)) if a != b), None
    )
    assert first_diff is None, f"cache state differs from probe {first_diff} on"
    np.testing.assert_equal(seqs, ref_seqs)  # NaN == NaN here
    return spans


def _raw(w: dict) -> dict:
    return {
        "seed": w["seed"],
        "duration_s": 5.0,
        "sample_interval_s": 0.5,
        "model": "llama-3-8b",
        "node": {"num_gpus": 1, "tp": 1, "kv_pool_bytes": w["pool_tokens"] * 131072},
        "cache": {
            "cache_outputs": w["cache_outputs"],
            "index": w["index"],
            "hash_bits": w["hash_bits"],
            "reclaim": w["reclaim"],
        },
        "cluster": {"num_nodes": w["nodes"]},
        "policies": {"routing": {"name": w["routing"], "params": {}}},
        "workload": {
            "name": "shared_prefix_groups",
            "params": {
                **(
                    {"arrival": "closed", "num_clients": w["clients"]}
                    if w["rate"] is None
                    else {"arrival": "poisson", "rate": w["rate"]}
                ),
                "num_groups": 3,
                "system_prompt_tokens": w["prompt"],
                "question_tokens": 48,
                "output_tokens": w["output"],
            },
        },
    }


workloads = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**16),
        "nodes": st.integers(1, 3),
        "rate": st.one_of(st.none(), st.floats(1.0, 40.0)),
        "clients": st.integers(1, 30),
        "prompt": st.integers(16, 1500),
        "output": st.integers(20, 400),
        "pool_tokens": st.sampled_from([6_000, 30_000, 300_000]),
        "cache_outputs": st.booleans(),
        "index": st.sampled_from(["two_level", "hash_only", "radix"]),
        "hash_bits": st.sampled_from([64, 10]),
        "reclaim": st.sampled_from(["epoch", "immediate"]),
        "routing": st.sampled_from(["round_robin", "prefix_affinity", "kv_cost"]),
        "arm": st.sampled_from(["paged+prefix", "engine"]),
    }
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads)
def test_span_stores_are_the_reference_at_every_probe(w):
    raw = _raw(w)
    try:
        resolve_arms(raw, [w["arm"]])
    except ConfigError:
        return  # a combination the config refuses (e.g. hash bits for this index)
    assert_same_both_ways(raw, w["arm"])


def test_spans_run_while_pages_are_stored():
    """Long outputs, prefix caching of outputs, prefix-affinity routing over two nodes: spans
    run although nearly every step fills a page to index; without probes, only the router's
    reads of the routing table bring them up to date (and it reads what the reference holds)."""
    w = {
        "seed": 11,
        "nodes": 2,
        "rate": 4.0,
        "clients": 0,
        "prompt": 600,
        "output": 300,
        "pool_tokens": 300_000,
        "cache_outputs": True,
        "index": "two_level",
        "hash_bits": 64,
        "reclaim": "epoch",
        "routing": "prefix_affinity",
    }
    spans = assert_same_both_ways(_raw(w), "engine", probes=False)
    assert spans > 500


@pytest.mark.pure  # patches Node
def test_router_brings_up_spans_storing_a_key_it_reads(monkeypatch):
    """8-bit page keys: pages a span fills collide with the keys of prompts being routed, so
    the router must bring those spans up to date before it reads the table (and only those)."""
    w = {
        "seed": 5,
        "nodes": 3,
        "rate": 6.0,
        "clients": 0,
        "prompt": 400,
        "output": 200,
        "pool_tokens": 300_000,
        "cache_outputs": True,
        "index": "two_level",
        "hash_bits": 8,
        "reclaim": "epoch",
        "routing": "prefix_affinity",
    }
    outcomes: list[bool] = []
    sync_index = Node.sync_index

    def counted(node: Node, keys: set[int]) -> None:
        behind = node._span_applied <= node._span_index
        sync_index(node, keys)
        if behind:  # brought up to date, or left behind (none of its pages has these keys)
            outcomes.append(node._span_applied > node._span_index)

    monkeypatch.setattr(Node, "sync_index", counted)
    assert assert_same_both_ways(_raw(w), "engine", probes=False) > 100
    assert any(outcomes) and not all(outcomes)
