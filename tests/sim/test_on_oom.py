"""cache.on_oom for the contiguous baseline: a request that finds enough free bytes but no hole
(fragmentation) waits, fails at once (reject), or takes the node's serving process down (crash)."""

from __future__ import annotations

from kvsched.experiment import run_arm
from sim.config import parse_config

CLOSED = {"num_clients": 6}
OPEN = {"arrival": "poisson", "rate": 2.0}


def fragmented(on_oom: str, arrival: dict) -> dict:
    """One node whose pool holds one 4096-token context (196,608 bytes per token): prompts of
    128-2048 tokens reserve prompt + 64 and leave holes that later prompts do not fit."""
    return {
        "duration_s": 120,
        "cluster": {"num_nodes": 1},
        "node": {"kv_pool_bytes": 4096 * 196608, "admission_watermark": 0},
        "cache": {
            "mechanism": "contiguous",
            "prefix_cache": False,
            "max_model_len": 4096,
            "max_new_tokens": 64,
            "on_oom": on_oom,
            "restart_s": 20,
        },
        "policies": {"routing": {"name": "round_robin"}},
        "workload": {
            "name": "no_sharing",
            "params": {"input_min": 128, "input_max": 2048, "output_min": 16, "output_max": 32}
            | arrival,
        },
    }


def _run(on_oom: str, arrival: dict):
    cfg = parse_config(fragmented(on_oom, arrival))
    cluster, metrics, requests, _ = run_arm(cfg, on_oom, show_progress=False)
    return cluster, metrics, requests


def test_wait_stalls_and_never_fails():
    _, m, _ = _run("wait", CLOSED)
    assert m["alloc_stalls"] == m["oom_events"] > 0
    assert (m["crashes"], m["failed"]) == (0, 0)


def test_reject_fails_fragmented_requests_at_once():
    _, m, r = _run("reject", CLOSED)
    assert m["failed"] > 0 and m["crashes"] == 0
    failed = r[r.status == "failed"]
    assert failed.first_token_s.isna().all() and (failed.output_tokens == 0).all()


def test_crash_takes_the_node_down_for_restart_s_and_closed_loop_clients_resend():
    cluster, m, r = _run("crash", CLOSED)
    wait = _run("wait", CLOSED)[1]
    assert 0 < m["crashes"] <= 120 // 20  # down 20 s after each crash
    assert m["failed"] == 0  # closed-loop clients send their lost requests again
    assert m["completed"] < wait["completed"] / 5
    done = r[r.status == "finished"]
    assert (done.first_token_s >= done.arrival_s).all()


def test_crash_fails_open_loop_requests_in_flight_and_arriving_while_down():
    _, m, _ = _run("crash", OPEN)
    assert m["crashes"] > 0 and m["failed"] > m["completed"]
