"""The parked-step driver (the default, sim/clock.py) reproduces the step-by-step reference
(`exact_steps: true`): every study in studies/ at a short duration, and random workloads, give
the same requests (same node, cached tokens, preemptions, status; timestamps within 1e-9 s), the
same time series and steps.csv rows, and the same summary."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsched.experiment import resolve_arms, run_arm
from policies import make_policy
from sim.cluster import Cluster
from sim.config import ConfigError
from workloads.registry import make_workload

ROOT = Path(__file__).resolve().parents[2]
STUDIES = sorted(
    p for p in (ROOT / "studies").glob("*.yaml") if not p.name.startswith(("sweep_", "tune_"))
)
SHORT_S = 20.0  # simulated seconds per study, as scripts/study_hashes.py
TIMES = ["arrival_s", "first_token_s", "finish_s", "routed_s", "scheduled_s"]
EXACT = ["request_id", "node", "prompt_tokens", "cached_tokens", "output_tokens", "preemptions"]
EXACT += ["false_hits", "wrong_reuse_tokens", "status", "use_after_free", "queued_step"]


def run_both(raw: dict, arm: str) -> tuple:
    out = []
    for exact in (True, False):
        cfg = resolve_arms({**raw, "exact_steps": exact}, [arm])[arm]
        cluster, summary, requests, series = run_arm(cfg, arm, show_progress=False)
        steps = sum(n.num_steps for n in cluster.nodes)
        spans = sum(n.num_span_steps for n in cluster.nodes)
        out.append(
            (summary, requests, series, steps, cluster.env.num_events, cluster.step_rows, spans)
        )
    return out[0], out[1]


def assert_same(ref: tuple, fast: tuple) -> None:
    (s_ref, r_ref, ts_ref, steps_ref, _, rows_ref, _) = ref
    (s_fast, r_fast, ts_fast, steps_fast, _, rows_fast, _) = fast
    assert steps_fast == steps_ref
    assert rows_fast == rows_ref  # steps.csv rows (when recorded): same steps, same order
    assert len(r_fast) == len(r_ref)
    pd.testing.assert_frame_equal(r_fast[EXACT], r_ref[EXACT])
    for col in TIMES:  # the same floats, bit for bit (NaN where a request never got there)
        a, b = r_fast[col].to_numpy(float), r_ref[col].to_numpy(float)
        assert np.array_equal(a, b, equal_nan=True), col
    pd.testing.assert_frame_equal(ts_fast, ts_ref, check_exact=True)
    assert s_fast.keys() == s_ref.keys()
    for key, want in s_ref.items():
        got = s_fast[key]
        if isinstance(want, float) and isinstance(got, float):
            assert got == want or (math.isnan(want) and math.isnan(got)), key
        else:
            assert got == want, key


def _short(study: Path) -> dict:
    raw = yaml.safe_load(study.read_text())
    raw["duration_s"] = min(float(raw.get("duration_s", SHORT_S)), SHORT_S)
    if raw.get("warmup_s", 0) >= raw["duration_s"]:  # the window would be empty
        del raw["warmup_s"]
    return raw


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.stem)
def test_every_study_is_the_same_both_ways(study):
    raw = _short(study)
    try:
        arms = list(resolve_arms(raw))
    except ConfigError as err:
        pytest.skip(str(err))
    for arm in arms:
        try:
            ref, fast = run_both(raw, arm)
        except (ConfigError, FileNotFoundError) as err:
            if "trace" in str(err).lower() or "no such file" in str(err).lower():
                pytest.skip(f"trace absent: {err}")
            raise
        assert_same(ref, fast)


def test_run_ahead_saves_events():
    """The Vidur-comparable case, shortened: far fewer SimPy events than node steps."""
    raw = yaml.safe_load((ROOT / "studies" / "vidur_case.yaml").read_text())
    if not Path(ROOT, raw["workload"]["params"]["path"]).is_file():
        pytest.skip("trace absent")
    raw["workload"]["params"]["max_requests"] = 128
    raw["duration_s"] = 40.0
    ref, fast = run_both(raw, "paged")
    assert_same(ref, fast)
    assert ref[4] > ref[3]  # the reference: a SimPy event per step, and the others
    assert fast[4] < ref[3] / 10  # step ends parked on the clock: arrivals, finishes, samples


# What every random workload draws (nodes, arrivals, sizes, arm, seed); each test adds its own.
WORKLOAD_FIELDS = {
    "nodes": st.integers(1, 3),
    "kind": st.sampled_from(["shared_prefix_groups", "no_sharing"]),
    "rate": st.one_of(st.none(), st.floats(0.5, 60.0)),
    "clients": st.integers(1, 40),
    "prompt": st.integers(8, 3000),
    "arm": st.sampled_from(["openclaw", "paged", "paged+prefix", "engine"]),
    "seed": st.integers(0, 2**16),
}

workloads = st.fixed_dictionaries(
    {
        **WORKLOAD_FIELDS,
        "output": st.integers(1, 300),
        "pool_tokens": st.sampled_from([20_000, 200_000, 900_000]),
        "sample": st.sampled_from([0.25, 1.0]),
    }
)


def _params(w: dict) -> dict:
    params: dict = (
        {"arrival": "closed", "num_clients": w["clients"]}
        if w["rate"] is None
        else {"arrival": "poisson", "rate": w["rate"]}
    )
    if w["kind"] == "no_sharing":
        return {
            **params,
            "input_min": 8,
            "input_max": w["prompt"],
            "output_min": 1,
            "output_max": w["output"],
        }
    return {
        **params,
        "num_groups": 4,
        "system_prompt_tokens": w["prompt"],
        "question_tokens": 64,
        "output_tokens": w["output"],
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads)
def test_random_workloads_are_the_same_both_ways(w):
    raw = {
        "seed": w["seed"],
        "duration_s": 6.0,
        "sample_interval_s": w["sample"],
        "record_steps": True,
        "model": "llama-3-8b",
        "node": {"num_gpus": 1, "tp": 1, "kv_pool_bytes": w["pool_tokens"] * 131072},
        "cluster": {"num_nodes": w["nodes"]},
        "workload": {"name": w["kind"], "params": _params(w)},
    }
    try:
        resolve_arms(raw, [w["arm"]])
    except ConfigError as err:
        pytest.skip(str(err))
    ref, fast = run_both(raw, w["arm"])
    assert_same(ref, fast)
    # Recording steps turns decode spans off (a recorder sees every step): the same workload
    # without it runs them, and must come out the same both ways too.
    ref, fast = run_both({**raw, "record_steps": False}, w["arm"])
    assert_same(ref, fast)


spans = st.fixed_dictionaries(
    {
        **WORKLOAD_FIELDS,
        "output": st.integers(1, 600),
        "pool_tokens": st.sampled_from([6_000, 20_000, 200_000]),
        "cache_outputs": st.booleans(),
        "reclaim": st.sampled_from(["epoch", "immediate"]),
        "race_window_s": st.sampled_from([0.0, 0.003]),
        "max_num_seqs": st.sampled_from([4, 256]),
    }
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spans)
def test_decode_spans_are_the_same_both_ways(w):
    """Without steps.csv the default driver runs decode spans (sim/node.py): interrupted by
    arrivals and routing reads, ended by finishes, by page shortage (small pools: preemptions),
    by pages to index (prefix caching of outputs), over one to three nodes."""
    raw = {
        "seed": w["seed"],
        "duration_s": 6.0,
        "sample_interval_s": 0.25,
        "model": "llama-3-8b",
        "node": {
            "num_gpus": 1,
            "tp": 1,
            "kv_pool_bytes": w["pool_tokens"] * 131072,
            "max_num_seqs": w["max_num_seqs"],
        },
        "cache": {
            "cache_outputs": w["cache_outputs"],
            "reclaim": w["reclaim"],
            "race_window_s": w["race_window_s"],
        },
        "cluster": {"num_nodes": w["nodes"]},
        "workload": {"name": w["kind"], "params": _params(w)},
    }
    try:
        resolve_arms(raw, [w["arm"]])
    except ConfigError as err:
        pytest.skip(str(err))
    ref, fast = run_both(raw, w["arm"])
    assert_same(ref, fast)


def two_nodes_without_reuse(seed: int, duration_s: float, **params) -> dict:
    """Two llama-3-8b nodes without a prefix cache, Poisson arrivals of unshared prompts of
    100 tokens and up (`params`: rate, input_max, output_min, output_max)."""
    workload = {"arrival": "poisson", "input_min": 100, **params}
    return {
        "seed": seed,
        "duration_s": duration_s,
        "model": "llama-3-8b",
        "node": {"num_gpus": 1, "tp": 1},
        "cache": {"prefix_cache": False},
        "cluster": {"num_nodes": 2},
        "workload": {"name": "no_sharing", "params": workload},
    }


def test_decode_spans_run_and_are_exact():
    """Long decodes, prefix caching off, two nodes, Poisson arrivals: most steps run inside
    spans, and the results are the reference's."""
    raw = two_nodes_without_reuse(3, 30.0, rate=3.0, input_max=2000, output_min=50, output_max=800)
    ref, fast = run_both(raw, "paged")
    assert_same(ref, fast)
    assert fast[6] > fast[3] // 2  # steps inside spans: most of them
    assert ref[6] == 0


@pytest.mark.parametrize(
    ("arm", "race_window_s"), [("paged", 0.0), ("openclaw", 0.0), ("paged", 0.002)]
)
def test_kv_usage_mid_span_is_the_synced_one(arm, race_window_s):
    """Node.kv_usage (what the time-series sampler reads) answers mid-span without bringing the
    span up to date (a race window: it does, as a use-after-free may count), and equals the
    usage and counters the node shows once it is."""
    raw = two_nodes_without_reuse(5, 12.0, rate=2.0, input_max=1500, output_min=100, output_max=600)
    raw["cache"] = {**raw["cache"], "race_window_s": race_window_s}
    cfg = resolve_arms(raw, [arm])[arm]
    workload = make_workload(cfg.workload.name, cfg.workload.params, np.random.default_rng(0))
    cluster = Cluster(cfg, workload, np.random.default_rng(1), make_policy)
    checks: list[tuple[bool, bool, bool]] = []
    returning = 0  # reads mid-span while pages retired before it are still to return
    prompts = 0  # ... while step 1's completed prompts are still to apply (Node._span_ahead)

    def counted(counters) -> tuple:
        depth = counters.evicted_by_depth
        return (*astuple_without_depth(counters), None if depth is None else depth.tolist())

    def probe(env):
        nonlocal returning, prompts
        while True:
            yield env.timeout(0.0173)
            for node in cluster.nodes:
                behind = node._span_applied <= node._span_index
                returning += behind and retired_pages(node) > 0
                prompts += behind and node._span_ahead is not None
                usage, counters = node.kv_usage()
                left_behind = node._span_applied <= node._span_index
                kv = node.kv  # brings the span up to date
                same = usage == kv.usage() and counted(counters) == counted(kv.counters())
                checks.append((behind, left_behind, same))

    cluster.env.process(probe(cluster.env))
    cluster.run()
    assert all(same for _, _, same in checks)
    assert sum(behind for behind, _, _ in checks) > 50  # mid-span reads did happen
    assert arm == "openclaw" or returning > 5  # (openclaw: contiguous, nothing retired)
    assert prompts > 5
    if race_window_s:
        assert not any(left for _, left, _ in checks)
    else:
        assert all(behind == left for behind, left, _ in checks)  # read without the sync


def retired_pages(node) -> int:
    """Pages retired on the node's pool (a contiguous pool has none)."""
    cache = getattr(node.scheduler.kv, "cache", None)
    return 0 if cache is None else cache.pool.num_retired


def astuple_without_depth(counters) -> tuple:
    return (
        counters.protected_pages,
        counters.evicted_pages,
        counters.use_after_free,
        counters.admission_rejected_tokens,
        counters.peak_retired_bytes,
        counters.alloc_stalls,
    )


def test_free_and_used_tokens_mid_span_are_the_synced_ones():
    """Node.free_tokens()/used_tokens() (what the router's views read) answer mid-span without
    bringing the span up to date, and equal what the node shows once it is."""
    raw = two_nodes_without_reuse(5, 12.0, rate=2.0, input_max=1500, output_min=100, output_max=600)
    cfg = resolve_arms(raw, ["paged"])["paged"]
    workload = make_workload(cfg.workload.name, cfg.workload.params, np.random.default_rng(0))
    cluster = Cluster(cfg, workload, np.random.default_rng(1), make_policy)
    checks: list[tuple[bool, bool]] = []
    returning = 0  # reads mid-span while pages retired before it are still to return
    prompts = 0  # ... while step 1's completed prompts are still to apply (Node._span_ahead)

    def probe(env):
        nonlocal returning, prompts
        while True:
            yield env.timeout(0.0173)
            for node in cluster.nodes:
                behind = node._span_applied <= node._span_index
                returning += behind and retired_pages(node) > 0
                prompts += behind and node._span_ahead is not None
                lazy = (node.free_tokens(), node.used_tokens())
                assert node.free_and_used_tokens() == lazy
                kv = node.kv  # brings the span up to date
                checks.append((behind, lazy == (kv.free_tokens(), kv.used_tokens())))

    cluster.env.process(probe(cluster.env))
    cluster.run()
    assert all(same for _, same in checks)
    assert sum(behind for behind, _ in checks) > 50  # mid-span reads did happen
    assert returning > 5  # ... some before the span's first end was applied (pages to return)
    assert prompts > 5  # ... some before the prompts a span's first step completed were
