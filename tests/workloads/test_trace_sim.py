"""A trace replayed through the simulator: the engine's hit rate equals the trace's own bound when
nothing is evicted, every shared prefix is whole pages, and each request finds its prefix done."""

from __future__ import annotations

import json

from kvsched.experiment import run_experiment
from workloads.trace_loaders import load_trace
from workloads.trace_stats import trace_stats

# Two sessions sharing block 0; each turn extends its session's previous prompt. Shared lengths are
# multiples of 16 tokens, so page-granular reuse equals token-granular reuse.
ROWS = [
    (0, 1024, [0, 1]),
    (500, 800, [0, 4]),
    (1000, 1408, [0, 1, 2]),
    (1500, 1300, [0, 4, 5]),
    (2000, 2048, [0, 1, 2, 3]),
]


def test_engine_hit_rate_equals_the_infinite_cache_bound(tmp_path, tiny_config):
    path = tmp_path / "mc.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": n, "output_length": 4, "hash_ids": ids})
            + "\n"
            for t, n, ids in ROWS
        )
    )
    bound = trace_stats(load_trace(path, "mooncake"), capacities=[1e6])
    assert bound["infinite_cache_token_hit_rate"] == (1024 + 1408 + 512 + 800) / (
        1024 + 800 + 1408 + 1300 + 2048
    )
    cfg = {
        **tiny_config,
        "duration_s": 10,
        "workload": {"name": "trace", "params": {"path": str(path), "format": "mooncake"}},
    }
    summary = run_experiment(
        cfg, tmp_path / "run", ["openclaw", "engine"], show_progress=False, write_report=False
    )
    engine, openclaw = summary["arms"]["engine"], summary["arms"]["openclaw"]
    assert engine["completed"] == openclaw["completed"] == 5
    assert engine["prefix_hit_rate"] == bound["infinite_cache_token_hit_rate"]
    assert openclaw["prefix_hit_rate"] == 0.0


def test_azure_replay_is_byte_identical_under_a_seed(tmp_path, tiny_config):
    path = tmp_path / "az.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:00:0{i}.5000000,{300 + 40 * i},3\n" for i in range(8))
    )
    params = {
        "path": str(path),
        "format": "azure",
        "shared_prefix_tokens": 256,
        "shared_prefix_share": 0.5,
    }
    cfg = {**tiny_config, "duration_s": 12, "workload": {"name": "trace", "params": params}}
    for out in ("a", "b"):
        run_experiment(cfg, tmp_path / out, ["engine"], show_progress=False, write_report=False)
    first, second = ((tmp_path / out / "summary.json").read_bytes() for out in ("a", "b"))
    assert first == second and json.loads(first)["arms"]["engine"]["completed"] == 8
    assert json.loads(first)["arms"]["engine"]["prefix_hit_rate"] > 0
