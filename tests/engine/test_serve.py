"""End to end on CPU: sim's scheduler and paged KV manager drive the tiny engine by wall clock.

Every output token a request got must be the reference model's greedy choice given the tokens
before it (so the engine read the right pages, prefix hits included), and the cached-token
counts are the KV manager's own.
"""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from engine.host_probe import PROBE_COLUMNS
from engine.kv_pool import KVPool
from engine.model import PagedModel
from engine.reference import reference_logits
from engine.runner import ENGINE_STEP_COLUMNS, GpuExecutor
from engine.shape import TINY, ModelShape
from engine.weights import random_weights
from kvsched.engine_run import capture_graphs, serve_one
from sim.config import parse_config
from sim.metrics import REQUEST_COLUMNS, SERIES_COLUMNS
from sim.steps import STEP_COLUMNS

RAW = {
    "name": "engine-tiny",
    "seed": 0,
    "duration_s": 300,  # the run ends when its 8 requests are done
    "model": {
        "num_layers": TINY.num_layers,
        "num_q_heads": TINY.num_q_heads,
        "num_kv_heads": TINY.num_kv_heads,
        "head_dim": TINY.head_dim,
        "hidden_size": TINY.hidden_size,
        "intermediate_size": TINY.intermediate_size,
        "vocab_size": TINY.vocab_size,
    },
    # 1 MB of "HBM": about 180 pages of 16 tokens for the tiny model
    "gpu": {"hbm_bytes": 1e6, "hbm_bytes_per_s": 1e12, "bf16_flops_per_s": 1e14,
            "interconnect_bytes_per_s": 1e11},
    "node": {"num_gpus": 1, "tp": 1, "max_num_batched_tokens": 64},
    "cluster": {"num_nodes": 1},
    "workload": {
        "name": "shared_prefix_groups",
        "params": {"num_groups": 2, "prompts_per_group": 4, "system_prompt_tokens": 40,
                   "question_tokens": 9, "output_tokens": 4, "num_clients": 3},
    },
}  # fmt: skip


@pytest.mark.parametrize("graphs", ["none", "all"])
def test_engine_run_matches_reference_and_counts_cache_hits(tmp_path, monkeypatch, graphs):
    """An engine run's sampled tokens match the reference. With graphs "all" every step runs on
    the graphs' static buffers (decode-only steps padded on the scratch page, the others in
    piecewise segments padded to a token bucket); on CPU nothing is captured, so this checks
    the buffers and padding the GPU replays."""
    cfg = parse_config(RAW)
    shape = ModelShape.from_model_config(cfg.model)
    assert shape == TINY
    weights = random_weights(shape, 0, "cpu")
    num_pages = cfg.kv_capacity_bytes // (16 * cfg.model.kv_bytes_per_token)
    pool = KVPool(shape.num_layers, num_pages + 1, shape.num_kv_heads, 16, shape.head_dim, "cpu")
    samples: dict[int, list[tuple[int, int]]] = {}  # request id -> (position, sampled token)
    ids: dict[int, np.ndarray] = {}
    run, forget = GpuExecutor.run, GpuExecutor.forget

    def recording_run(self, items):
        timing, sampled = run(self, items)
        for (seq, n, _), token in zip(items, sampled, strict=True):
            samples.setdefault(seq.req.request_id, []).append((seq.num_computed + n - 1, token))
        return timing, sampled

    def keep(self, seq):  # the ids it fed, before the executor drops them
        ids[seq.req.request_id] = self._ids[seq.req.request_id].copy()
        forget(self, seq)

    monkeypatch.setattr(GpuExecutor, "run", recording_run)
    monkeypatch.setattr(GpuExecutor, "forget", keep)
    forward = capture_graphs(PagedModel(shape, weights, pool), graphs, [cfg], num_pages)
    summary = serve_one(cfg, RAW, forward, tmp_path / "run")
    eng = summary["arms"]["engine"]
    assert eng["completed"] == 8 and eng["prefix_hit_rate"] > 0
    agree = total = 0
    for rid, seq_ids in ids.items():
        positions, sampled = zip(*samples[rid], strict=True)
        ref = reference_logits(shape, weights, torch.tensor(seq_ids[: max(positions) + 1]))
        agree += int((ref[list(positions)].argmax(-1) == torch.tensor(sampled)).sum())
        total += len(sampled)
    assert agree >= 0.95 * total, f"{agree}/{total} greedy tokens agree with the reference"
    run_dir = tmp_path / "run" / "engine"
    requests = pd.read_csv(run_dir / "requests.csv")
    steps = pd.read_csv(run_dir / "steps.csv")
    assert list(requests.columns) == REQUEST_COLUMNS
    assert list(steps.columns) == STEP_COLUMNS + ENGINE_STEP_COLUMNS
    assert len(steps) == eng["num_steps"] > 0
    # the host time around each step, split (rounded to 6 decimals when written)
    assert (steps[["plan_s", "apply_s", "loop_s"]] >= 0).all().all()
    assert (steps.sched_s - steps.plan_s - steps.apply_s).abs().max() <= 2e-6
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["arms"]["engine"]
    assert requests.cached_tokens.max() >= 32  # two full pages of a group's system prompt
    assert steps.cached_tokens.sum() == requests.cached_tokens.sum()
    series = pd.read_csv(run_dir / "timeseries.csv")  # the simulator's samples, 1 s apart
    assert list(series.columns) == SERIES_COLUMNS
    assert series.time_s.tolist() == [float(i) for i in range(len(series))]
    assert (series.node == 0).all() and (series.kv_capacity_bytes > 0).all()
    speed = pd.read_csv(run_dir / "host_speed.csv")  # the host probe, before the first step
    assert list(speed.columns) == PROBE_COLUMNS and speed.t_s.iloc[0] <= steps.start_s.iloc[0]
    assert speed.t_s.is_monotonic_increasing and (speed.probe_s > 0).all()
