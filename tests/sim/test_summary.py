"""summarize(): every headline metric on a hand-built run with known answers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from sim.kv.protocol import CacheCounters
from sim.metrics import REQUEST_COLUMNS, SERIES_COLUMNS, summarize


def fake_cluster(mechanism: str = "paged", warmup_s: float = 0.0):
    kv = SimpleNamespace(counters=CacheCounters)  # no cache, no stalls: every counter 0
    nodes = [
        SimpleNamespace(kv=kv, num_preemptions=1, num_crashes=0, busy_s=5.0),
        SimpleNamespace(kv=kv, num_preemptions=2, num_crashes=1, busy_s=15.0),
    ]
    cfg = SimpleNamespace(
        duration_s=10.0,
        warmup_s=warmup_s,
        cache=SimpleNamespace(mechanism=mechanism),
        gpu=SimpleNamespace(step_overhead_s=0.0, step_overhead_source="not measured"),
    )
    return SimpleNamespace(
        cfg=cfg, nodes=nodes, placement=None, router=None, env=SimpleNamespace(now=10.0)
    )


def requests() -> pd.DataFrame:
    rows = [
        # id, arm, node, tag, arrival, first token, finish, prompt, cached, output, preempt, fh, wrong, status, routed, uaf
        (0, "a", 0, "", 0.0, 0.1, 1.1, 100, 50, 11, 0, 0, 0, "finished", 0.0, 0),
        (1, "a", 1, "", 1.0, 1.3, 3.3, 300, 0, 5, 0, 1, 0, "finished", 1.0, 0),
        (
            2,
            "a",
            1,
            "",
            2.0,
            2.2,
            2.2,
            100,
            100,
            1,
            0,
            0,
            0,
            "finished",
            2.0,
            0,
        ),  # one output: no TPOT
        (3, "a", 0, "", 5.0, np.nan, np.nan, 400, 0, 0, 0, 0, 0, "unfinished", 5.0, 0),
        (4, "a", -1, "", 6.0, np.nan, 6.0, 900, 0, 0, 0, 0, 0, "failed", 6.0, 0),
    ]
    new = ("scheduled_s", "queued_step")  # summarize does not read them
    frame = pd.DataFrame(rows, columns=[c for c in REQUEST_COLUMNS if c not in new])
    frame["scheduled_s"], frame["queued_step"] = frame.arrival_s, 0
    return frame[REQUEST_COLUMNS]


def series() -> pd.DataFrame:
    base = dict.fromkeys(SERIES_COLUMNS, 0)
    rows = []
    for t, alloc, cached, retired, pool, live in [(0.0, 10, 5, 1, 40, 8), (1.0, 30, 2, 3, 60, 20)]:
        for node in (0, 1):
            rows.append(
                {
                    **base,
                    "time_s": t,
                    "node": node,
                    "kv_allocated_bytes": alloc,
                    "kv_cached_bytes": cached,
                    "kv_retired_bytes": retired,
                    "kv_pool_bytes": pool,
                    "kv_live_bytes": live,
                    "load": 0.2 if node == 0 else 0.6,
                }
            )
    return pd.DataFrame(rows)


def test_latency_throughput_and_hit_rate_are_exact():
    m = summarize(requests(), series(), fake_cluster())
    assert (m["completed"], m["failed"], m["unfinished"]) == (3, 1, 1)
    assert m["request_throughput"] == pytest.approx(0.3)
    assert m["output_throughput"] == pytest.approx(1.7)  # 17 output tokens in 10 s
    assert m["total_token_throughput"] == pytest.approx((17 + 500) / 10)
    assert m["mean_ttft_ms"] == pytest.approx((100 + 300 + 200) / 3)
    # TPOT over requests with more than one output token: 1000 ms / 10 and 2000 ms / 4.
    assert m["mean_tpot_ms"] == pytest.approx((100 + 500) / 2)
    assert m["p50_e2el_ms"] == pytest.approx(1100)
    assert m["prefix_hit_rate"] == pytest.approx(150 / 500)  # completed requests only
    assert m["preemptions"] == 3 and m["oom_events"] == 0 and m["false_hits"] == 1
    assert m["max_node_request_share"] == pytest.approx(0.5)  # 2 of 4 routed requests per node
    assert m["load_imbalance"] == pytest.approx(0.6 / 0.4)
    assert m["busy_imbalance"] == pytest.approx(15 / 10)


def test_peak_kv_is_what_cannot_be_reused_without_evicting():
    paged = summarize(requests(), series(), fake_cluster("paged"))
    assert paged["peak_kv_bytes"] == 2 * (30 + 3)  # allocated + retired, two nodes
    assert paged["peak_cached_kv_bytes"] == 2 * 5
    assert paged["kv_utilization"] == pytest.approx((8 + 20) / (10 + 30))
    contiguous = summarize(requests(), series(), fake_cluster("contiguous"))
    assert contiguous["peak_kv_bytes"] == 2 * 60  # the grown pool, holes included


def test_no_completed_request_gives_nulls_not_nan():
    r = requests()
    r["status"] = "unfinished"
    m = summarize(r, series(), fake_cluster())
    assert m["completed"] == 0 and m["mean_ttft_ms"] is None and m["p99_tpot_ms"] is None
    assert m["prefix_hit_rate"] == 0.0


def test_censored_p99_counts_unfinished_requests_at_their_age():
    m = summarize(requests(), series(), fake_cluster())
    # Request 3 arrived at 5 s and has no first token at the end (10 s): TTFT and E2E >= 5000 ms.
    assert m["p99_ttft_censored_ms"] == pytest.approx(np.percentile([100, 300, 200, 5000], 99))
    assert m["p99_e2el_censored_ms"] == pytest.approx(np.percentile([1100, 2300, 200, 5000], 99))
    assert m["p99_ttft_ms"] == pytest.approx(np.percentile([100, 300, 200], 99))


def test_warmup_requests_are_served_but_not_counted():
    m = summarize(requests(), series(), fake_cluster(warmup_s=1.5))
    # Requests 0 and 1 arrived before 1.5 s: left out; the window is 10 - 1.5 s.
    assert (m["completed"], m["failed"], m["unfinished"]) == (1, 1, 1)
    assert m["measured_s"] == pytest.approx(8.5)
    assert m["output_throughput"] == pytest.approx(1 / 8.5)
    assert m["mean_ttft_ms"] == pytest.approx(200)


def test_crashes_and_alloc_stalls_with_the_old_name_as_alias():
    m = summarize(requests(), series(), fake_cluster())
    assert m["crashes"] == 1 and m["alloc_stalls"] == m["oom_events"] == 0


def test_step_overhead_is_labelled_not_measured_by_default():
    m = summarize(requests(), series(), fake_cluster())
    assert (m["step_overhead_ms"], m["step_overhead_source"]) == (0.0, "not measured")
