"""KV placement across nodes: which node holds each page, what crosses the network, and when.

Hand-built clusters of tiny pools (8 pages of 16 tokens) so every page and every second is exact.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import simpy
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import make_policy
from policies.admission import Always, NoParams
from policies.eviction import LRU
from sim.config import PolicySpec, parse_config
from sim.kv.manager import PagedKV
from sim.kv.paged_cache import PagedKVCache
from sim.sequence import Sequence, Status
from sim.xnode.page_index_codec import encoded_size
from sim.xnode.placement import PlacedKV, make_placement
from tests.helpers import ConstantLatency, make_request, sim_node
from tests.helpers import submit_at as submit

PAGE = 16
STEP_S = 0.01
TB = 131072  # llama-3-8b KV bytes per token
BW = TB * 1000.0  # one token per millisecond


def make_cluster(
    policy: str, num_nodes: int = 3, pages: int = 8, prefix_cache: bool = False, **placement
):
    cfg = parse_config(
        {
            "model": "llama-3-8b",
            "cluster": {"num_nodes": num_nodes},
            "node": {"num_gpus": 1, "tp": 1, "admission_watermark": 0},
            "placement": {"policy": policy, **placement},
            "network": {
                "mode": "rdma",
                "rdma_post_s": 0,
                "link": {"bandwidth_bytes_per_s": BW, "latency_s": 0, "max_message_bytes": 65536},
            },
        }
    )
    env = simpy.Environment()
    finished: list[Sequence] = []
    paged = []
    for i in range(num_nodes):
        cache = PagedKVCache(
            pages,
            PAGE,
            PAGE * TB,
            eviction=LRU(NoParams()),
            admission=Always(NoParams()),
            prefix_cache=prefix_cache,
            node_id=i,
        )
        paged.append(PagedKV(cache, TB))
    nodes: list = []
    strategy = None
    if policy != "local_only":
        shard = {
            "shard_nodes": cfg.placement.shard_nodes,
            "stripe_pages": cfg.placement.stripe_pages,
        }
        params = shard if policy == "shard" else {}
        strategy = make_policy("placement", PolicySpec(name=policy, params=params))
    placement = make_placement(cfg, paged, lambda: env.now, lambda n: nodes[n].wake(), strategy)
    for i, kv in enumerate(paged):
        wired = kv if placement is None else PlacedKV(kv, i, placement)
        transfer = None if placement is None else placement.traffic.step_transfer_s
        nodes.append(
            sim_node(env, i, cfg.node, wired, ConstantLatency(STEP_S), finished.append, transfer)
        )
    return env, nodes, placement, finished


def cache(node) -> PagedKVCache:
    """The node's own paged cache (under placement's wrapper, if any)."""
    kv = node.kv
    return kv.inner.cache if isinstance(kv, PlacedKV) else kv.cache


def check_clean(nodes, placement) -> None:
    assert placement.records == {}
    assert placement.out_pages == [0] * len(nodes) and placement.hosted_pages == [0] * len(nodes)
    for node in nodes:
        cache(node).pool.check_invariants()
        assert cache(node).pool.num_used == 0


def test_local_only_builds_nothing():
    env, nodes, placement, _ = make_cluster("local_only")
    assert placement is None
    assert all(type(n.kv) is PagedKV and n.executor.transfer is None for n in nodes)


def test_spill_overflows_to_the_peer_with_most_room_and_the_step_waits_for_it():
    env, nodes, placement, finished = make_cluster("spill")
    held = cache(nodes[1]).allocate(3, 0.0)  # node 1 has 5 pages of room, node 2 has 8
    seq = submit(env, nodes[0], 0.0, make_request(0, np.arange(200), output_tokens=2))
    env.run(until=0.005)
    rec = placement.records[seq]
    assert rec.lead == 8 and len(seq.pages) == 8  # the local pages lead, the prefix index sees them
    assert rec.nodes == [2] * 5 and rec.pages == [0, 1, 2, 3, 4]
    assert (placement.out_pages, placement.hosted_pages) == ([5, 0, 0], [0, 0, 5])
    env.run(until=1.0)
    hs = encoded_size({2: [0, 1, 2, 3, 4]}) / BW
    # Prefill: write 4 full pages + 8 tokens (72 tokens) to node 2. Decode: read those 72 tokens
    # (and write 1): the larger direction is 72 ms on the wire, after the index handshake.
    assert seq.first_token_s == pytest.approx(STEP_S + hs + 0.072, abs=1e-12)
    assert seq.finish_s == pytest.approx(2 * (STEP_S + hs + 0.072), abs=1e-12)
    t = placement.network.totals
    assert (t.read_bytes, t.write_bytes, t.num_transfers) == (72 * TB, 73 * TB, 2)
    m = placement.summary(duration_s=1.0)  # one decode step waited hs + 72 ms; its bound is 72 ms
    assert m["remote_decode_steps"] == 1 and m["remote_requests"] == 1
    assert m["remote_decode_transfer_ms"] == pytest.approx((hs + 0.072) * 1e3)
    assert m["remote_decode_wire_ms"] == pytest.approx(72.0)
    assert finished == [seq]
    assert cache(nodes[2]).pool.num_free == 8  # node 2 was asleep: its pages came back at once
    cache(nodes[1]).release(held)
    check_clean(nodes, placement)


def test_spill_keeps_requests_local_while_they_fit():
    env, nodes, placement, _ = make_cluster("spill")
    seq = submit(env, nodes[0], 0.0, make_request(0, np.arange(100), output_tokens=3))
    env.run(until=1.0)
    assert seq.status is Status.FINISHED and seq.finish_s == pytest.approx(3 * STEP_S)
    assert not placement.remote_requests and placement.network.totals.num_transfers == 0


def test_shard_stripes_over_the_owner_and_the_roomiest_peers():
    env, nodes, placement, _ = make_cluster("shard", shard_nodes=3, stripe_pages=2)
    seq = submit(env, nodes[1], 0.0, make_request(0, np.arange(96), output_tokens=2))
    env.run(until=0.005)
    rec = placement.records[seq]
    assert rec.members == (1, 0, 2)
    assert rec.lead == 2 and rec.nodes == [0, 0, 2, 2]  # stripe 0 is the owner's: it leads
    env.run(until=0.5)  # the decode token starts page 6: stripe 3 -> member 0 = the owner
    assert seq.status is Status.FINISHED
    assert placement.network.totals.read_bytes == 64 * TB  # pages 2-5 read once, by the decode step
    check_clean(nodes, placement)


def test_short_prompts_stay_local_under_shard():
    env, nodes, placement, _ = make_cluster(
        "shard", shard_nodes=3, stripe_pages=2, min_prompt_tokens=97
    )
    seq = submit(env, nodes[0], 0.0, make_request(0, np.arange(96), output_tokens=2))
    env.run(until=0.5)
    assert seq.status is Status.FINISHED and not placement.remote_requests


def test_the_prefix_index_sees_only_the_leading_local_pages():
    env, nodes, placement, _ = make_cluster("spill", prefix_cache=True)
    prompt = np.arange(200)
    first = submit(env, nodes[0], 0.0, make_request(0, prompt, output_tokens=2))
    second = submit(env, nodes[0], 0.5, make_request(1, prompt, output_tokens=2))
    env.run(until=0.55)
    assert first.status is Status.FINISHED
    assert second.cached_tokens == 8 * PAGE  # the 8 local pages were indexed, the spilled 4 not
    rec = placement.records[second]
    assert rec.lead == 8 and set(rec.nodes) == {1}  # node 0 is full of its cached pages
    env.run(until=2.0)
    assert second.status is Status.FINISHED


def test_kv_usage_counts_pages_where_they_live():
    env, nodes, placement, _ = make_cluster("spill")
    submit(env, nodes[0], 0.0, make_request(0, np.arange(200), output_tokens=2))
    env.run(until=STEP_S + 0.05)  # after the prefill step
    owner, host = nodes[0].kv.usage(), nodes[1].kv.usage()
    assert owner.allocated_bytes == 8 * PAGE * TB and host.allocated_bytes == 5 * PAGE * TB
    assert host.live_bytes == host.allocated_bytes
    assert isinstance(nodes[0].kv, PlacedKV) and nodes[0].kv.free_tokens() == 0


def seq_of(prompt_tokens: int, output_tokens: int = 1) -> Sequence:
    req = make_request(0, np.arange(prompt_tokens), output_tokens=output_tokens)
    return Sequence(req=req, keys=np.zeros(0, dtype=np.uint64), arrival_s=0.0)


def test_can_ever_fit():
    _, _, spill, _ = make_cluster("spill")  # 3 nodes x 8 pages of 16 tokens
    assert spill.can_ever_fit(seq_of(383)) and not spill.can_ever_fit(seq_of(384))  # 24 | 25 pages
    _, _, shard, _ = make_cluster("shard", shard_nodes=2, stripe_pages=4)
    assert shard.can_ever_fit(seq_of(255))  # 16 pages: 8 per member
    assert not shard.can_ever_fit(seq_of(256))  # 17 pages: stripes give the owner 9
    _, _, short, _ = make_cluster("spill", min_prompt_tokens=1000)
    assert short.can_ever_fit(seq_of(127)) and not short.can_ever_fit(seq_of(128))  # one node


request_lists = st.lists(
    st.tuples(st.integers(0, 2), st.integers(1, 300), st.integers(1, 20), st.floats(0, 0.2)),
    min_size=1,
    max_size=12,
)


def run_random(policy: str, reqs, feasible: bool):
    env, nodes, placement, _ = make_cluster(policy, shard_nodes=3, stripe_pages=3)
    seqs, pages = [], 0
    for i, (node, prompt, output, t) in enumerate(reqs):
        seq = seq_of(prompt, output)
        need = -(-(prompt + output) // PAGE)
        if placement.can_ever_fit(seq) and (not feasible or pages + need <= 3 * 8):
            pages += need
            seqs.append(
                submit(env, nodes[node], t, make_request(i, np.arange(prompt) + 1000 * i, output))
            )
    env.run(until=30.0)
    return nodes, placement, seqs


@settings(max_examples=30, deadline=None)
@given(policy=st.sampled_from(["spill", "shard"]), reqs=request_lists)
def test_when_everything_fits_at_once_every_request_finishes_and_every_page_comes_back(
    policy, reqs
):
    nodes, placement, seqs = run_random(policy, reqs, feasible=True)
    assert all(s.status is Status.FINISHED for s in seqs)
    check_clean(nodes, placement)


@settings(max_examples=30, deadline=None)
@given(policy=st.sampled_from(["spill", "shard"]), reqs=request_lists)
def test_under_any_load_pages_are_conserved_and_counted_where_they_live(policy, reqs):
    nodes, placement, _ = run_random(policy, reqs, feasible=False)
    for node in nodes:
        cache(node).pool.check_invariants()
    hosted = np.zeros(len(nodes), dtype=int)
    for rec in placement.records.values():
        hosted += np.bincount([n for n in rec.nodes if n != rec.owner], minlength=len(nodes))
    assert placement.hosted_pages == hosted.tolist()
    assert sum(placement.out_pages) == int(hosted.sum())


# -- end to end through `kvsched run` -------------------------------------------------------------
def long_config(tiny_config) -> dict:
    """Two tiny nodes (~17.5K tokens of KV each) and 20K-token requests that no node can hold."""
    cfg = {
        **tiny_config,
        "duration_s": 20,
        "cluster": {"num_nodes": 2},
        "network": {"mode": "rdma"},
    }
    cfg["node"] = {"num_gpus": 1, "tp": 1, "kv_memory_fraction": 0.13}
    cfg["workload"] = {
        "name": "long_context",
        "params": {
            **tiny_config["workload"]["params"],
            "context_share": 0.3,
            "context_tokens": 20000,
        },
    }
    cfg["placement"] = {"min_prompt_tokens": 10000}
    cfg["arms"] = {
        "local_only": {},
        "spill": {"placement": {"policy": "spill"}},
        "shard": {"placement": {"policy": "shard", "shard_nodes": 2}},
    }
    return cfg


def run_cli(tmp_path, cfg, out="run") -> int:
    from kvsched.cli import main

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return main(
        ["run", "--config", str(path), "--out", str(tmp_path / out), "--quiet", "--no-report"]
    )


def test_long_requests_fail_locally_and_are_served_across_nodes(tmp_path, tiny_config):
    assert run_cli(tmp_path, long_config(tiny_config)) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["arms"]
    frames = {arm: pd.read_csv(tmp_path / "run" / arm / "requests.csv") for arm in summary}
    long = {arm: df[df.tag.str.startswith("xlong")] for arm, df in frames.items()}
    assert len(long["local_only"]) and (long["local_only"].status == "failed").all()
    assert "network_bytes" not in summary["local_only"]  # local_only: today's summary, unchanged
    for arm in ("spill", "shard"):
        assert (long[arm].status == "finished").any() and not (long[arm].status == "failed").any()
        m = summary[arm]
        assert m["network_bytes"] > 0 and m["remote_requests"] > 0
        assert 0 < m["link_utilization_max"] <= 1 and m["network_transfer_s"] >= m["network_wire_s"]


def test_placed_runs_are_deterministic(tmp_path, tiny_config):
    cfg = long_config(tiny_config)
    cfg["arms"] = {"spill": cfg["arms"]["spill"]}
    assert run_cli(tmp_path, cfg, "a") == 0 and run_cli(tmp_path, cfg, "b") == 0
    assert (tmp_path / "a" / "summary.json").read_bytes() == (
        tmp_path / "b" / "summary.json"
    ).read_bytes()


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        (
            {"network": {"link": {"preset": "rdma-400g", "bandwidth_bytes_per_s": 0}}},
            "network.link.bandwidth_bytes_per_s: Input should be greater than 0",
        ),
        (
            {"placement": {"policy": "shard", "shard_nodes": 3}},
            "shard_nodes=3 is larger than the cluster",
        ),
        (
            {"network": {"link": {"preset": "rdma-400g", "max_message_bytes": 8}}},
            "max_message_bytes=8 cannot hold one page's index entry",
        ),
    ],
)
def test_bad_network_or_placement_exits_2_with_one_line(
    tmp_path, tiny_config, capsys, patch, needle
):
    cfg = {**long_config(tiny_config), **patch, "arms": {}}
    assert run_cli(tmp_path, cfg) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "run.partial").exists()
