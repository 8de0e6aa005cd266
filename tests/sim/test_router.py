"""The router as a resource: exact decision times per lane, its wait in TTFT, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from kvsched.cli import main
from policies import make_policy
from policies.registry import ROUTING
from sim.cluster import Cluster
from sim.config import parse_config
from sim.kv.hashing import page_keys
from sim.request import Workload
from tests.helpers import make_request, tiny_config


def cluster_for(requests, **router) -> Cluster:
    cfg = parse_config(
        {
            "duration_s": 5,
            "model": "llama-3-8b",
            "node": {"num_gpus": 1, "tp": 1},
            "cluster": {"num_nodes": 2},
            "router": router,
        }
    )
    return Cluster(cfg, Workload("hand", iter(requests)), np.random.default_rng(0), make_policy)


def three_at_zero(first_tokens=(0, 0, 0)):
    return [
        make_request(i, np.arange(first, first + 64), arrival_s=0.0)
        for i, first in enumerate(first_tokens)
    ]


def routed_times(cluster: Cluster) -> list[float]:
    cluster.run()
    return [s.routed_s for s in cluster.sequences]


def test_one_lane_serves_decisions_one_after_another():
    assert routed_times(
        cluster_for(three_at_zero(), lanes=1, decision_time_s=0.001)
    ) == pytest.approx([0.001, 0.002, 0.003], abs=1e-12)


def test_two_any_lanes_decide_two_at_a_time():
    assert routed_times(
        cluster_for(three_at_zero(), lanes=2, decision_time_s=0.001)
    ) == pytest.approx([0.001, 0.001, 0.002], abs=1e-12)


def test_prefix_lanes_queue_one_shared_prefix_on_one_lane():
    # the same first page: one lane, whatever the lane count
    same = cluster_for(three_at_zero(), lanes=4, decision_time_s=0.001, lane_by="prefix")
    assert routed_times(same) == pytest.approx([0.001, 0.002, 0.003], abs=1e-12)
    requests = three_at_zero((0, 1000, 2000))
    lane_of = [int(page_keys(r.prompt, 16)[0]) % 4 for r in requests]
    spread = cluster_for(requests, lanes=4, decision_time_s=0.001, lane_by="prefix")
    spread.run()
    expected, busy_until = [], {}
    for lane in lane_of:  # each lane serves its own queue in arrival order
        busy_until[lane] = busy_until.get(lane, 0.0) + 0.001
        expected.append(busy_until[lane])
    assert [s.routed_s for s in spread.sequences] == pytest.approx(expected, abs=1e-12)


def test_zero_decision_time_routes_at_arrival():
    assert routed_times(cluster_for(three_at_zero(), decision_time_s=0.0)) == [0.0, 0.0, 0.0]


def test_router_wait_adds_exactly_to_ttft():
    def ttft(decision_time_s: float) -> float:
        cluster = cluster_for(
            [make_request(0, np.arange(64), arrival_s=0.0)], decision_time_s=decision_time_s
        )
        cluster.run()
        seq = cluster.sequences[0]
        return seq.first_token_s - seq.arrival_s

    assert ttft(0.002) - ttft(0.0) == pytest.approx(0.002, abs=1e-12)


def tiny(tmp_path, routing: dict, **extra) -> dict:
    base = tiny_config(4, cluster={"num_nodes": 2}, policies={"routing": routing}, arms={"a": {}})
    return {**base, **extra}


def run(tmp_path, cfg, out="run") -> int:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return main(
        ["run", "--config", str(path), "--out", str(tmp_path / out), "--quiet", "--no-report"]
    )


@pytest.mark.parametrize("policy", sorted(ROUTING))
def test_every_routing_policy_runs_a_cluster(tmp_path, policy):
    assert run(tmp_path, tiny(tmp_path, {"name": policy})) == 0
    metrics = json.loads((tmp_path / "run" / "summary.json").read_text())["arms"]["a"]
    assert metrics["completed"] > 0 and metrics["load_imbalance"] >= 1.0
    assert 0.5 <= metrics["max_node_request_share"] <= 1.0


@pytest.mark.parametrize(
    "routing",
    [
        {"name": "kv_cost", "params": {"temperature": 0.5}},
        {"name": "decentralized", "params": {"num_routers": 3}},
    ],
)
def test_seeded_routing_is_byte_identical(tmp_path, routing):
    assert run(tmp_path, tiny(tmp_path, routing), "a") == 0
    assert run(tmp_path, tiny(tmp_path, routing), "b") == 0
    assert (tmp_path / "a" / "summary.json").read_bytes() == (
        tmp_path / "b" / "summary.json"
    ).read_bytes()


@pytest.mark.parametrize(
    ("routing", "extra", "needle"),
    [
        (
            {"name": "telepathy"},
            {},
            "policies.routing.name: unknown policy 'telepathy'; allowed: decentralized",
        ),
        (
            {"name": "prefix_affinity", "params": {"load_threshold": 1.5}},
            {},
            "policies.routing.params.load_threshold",
        ),
        (
            {"name": "sglang_cache_aware", "params": {"cache_threshold": 2}},
            {},
            "policies.routing.params.cache_threshold",
        ),
        (
            {"name": "sglang_cache_aware", "params": {"balance_rel_threshold": 0.5}},
            {},
            "policies.routing.params.balance_rel_threshold",
        ),
        (
            {"name": "kv_cost", "params": {"temperature": -1}},
            {},
            "policies.routing.params.temperature",
        ),
        (
            {"name": "decentralized", "params": {"num_routers": 0}},
            {},
            "policies.routing.params.num_routers",
        ),
        ({"name": "round_robin"}, {"cluster": {"num_nodes": 0}}, "cluster.num_nodes"),
        ({"name": "round_robin"}, {"router": {"lanes": 0}}, "router.lanes"),
        ({"name": "round_robin"}, {"router": {"decision_time_s": -1}}, "router.decision_time_s"),
    ],
)
def test_bad_routing_input_exits_2_with_one_line(tmp_path, capsys, routing, extra, needle):
    assert run(tmp_path, tiny(tmp_path, routing, **extra)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "run.partial").exists()
