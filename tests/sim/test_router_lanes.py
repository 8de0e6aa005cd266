"""The router's lanes replayed on the clock (the default driver, sim/router.py) decide and deliver
exactly as the reference's SimPy process per decision (`exact_steps: true`): busy lanes, queues
in line, lanes by prefix or any, open and closed loops, policies reading the nodes' free KV while
they decode in spans; requests, time series and summaries equal."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim.test_event_driver import assert_same, run_both

lanes = st.fixed_dictionaries(
    {
        "lanes": st.integers(1, 4),
        "lane_by": st.sampled_from(["any", "prefix"]),
        # from far below a step to longer than one: the line grows and drains
        "decision_time_s": st.sampled_from([1e-5, 0.001, 0.004, 0.03]),
        "nodes": st.integers(1, 3),
        "rate": st.one_of(st.none(), st.floats(5.0, 400.0)),
        "clients": st.integers(1, 60),
        "arm": st.sampled_from(["paged", "engine"]),
        # load-reading policies: their views read free and used KV mid-span (sim/node.py)
        "routing": st.sampled_from([None, "least_kv", "least_loaded"]),
        "seed": st.integers(0, 2**16),
    }
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lanes)
def test_lanes_decide_the_same_both_ways(w):
    arrival = (
        {"arrival": "closed", "num_clients": w["clients"]}
        if w["rate"] is None
        else {"arrival": "poisson", "rate": w["rate"]}
    )
    raw = {
        "seed": w["seed"],
        "duration_s": 3.0,
        "sample_interval_s": 0.25,
        "model": "llama-3-8b",
        "node": {"num_gpus": 1, "tp": 1},
        "cluster": {"num_nodes": w["nodes"]},
        "router": {k: w[k] for k in ("lanes", "lane_by", "decision_time_s")},
        "workload": {
            "name": "shared_prefix_groups",
            "params": {
                **arrival,
                "num_groups": 3,
                "system_prompt_tokens": 256,
                "question_tokens": 32,
                "output_tokens": 16,
            },
        },
    }
    arm = w["arm"]
    if w["routing"] is not None:  # the arm's cache, this routing policy
        raw["arms"] = {"x": {"cache": {"prefix_cache": arm == "engine"}}}
        raw["policies"] = {"routing": {"name": w["routing"]}}
        arm = "x"
    ref, fast = run_both(raw, arm)
    assert_same(ref, fast)
    assert fast[4] < ref[4] or ref[1].empty  # fewer SimPy events: no process per decision
