"""End to end on CPU: sim's scheduler and paged KV manager drive the tiny engine by wall clock.

Every output token a request got must be the reference model's greedy choice given the tokens
before it (so the engine read the right pages, prefix hits included), and the cached-token
counts are the KV manager's own.
"""

import json

import numpy as np
import torch

from engine.kv_pool import KVPool
from engine.model import PagedModel
from engine.reference import reference_logits
from engine.runner import GpuExecutor
from engine.serve import serve_one
from engine.shape import TINY, ModelShape
from engine.weights import random_weights
from sim.config import parse_config

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


def test_engine_run_matches_reference_and_counts_cache_hits(tmp_path, monkeypatch):
    cfg = parse_config(RAW)
    shape = ModelShape.from_model_config(cfg.model)
    assert shape == TINY
    weights = random_weights(shape, 0, "cpu")
    num_pages = cfg.kv_capacity_bytes // (16 * cfg.model.kv_bytes_per_token)
    pool = KVPool(shape.num_layers, num_pages, shape.num_kv_heads, 16, shape.head_dim, "cpu")
    outputs: dict[int, list[int]] = {}
    prompts: dict[int, np.ndarray] = {}
    forget = GpuExecutor.forget

    def keep(self, seq):  # record outputs before the executor drops them
        outputs[seq.req.request_id] = list(self.generated[seq.req.request_id])
        prompts[seq.req.request_id] = seq.req.prompt % TINY.vocab_size
        forget(self, seq)

    monkeypatch.setattr(GpuExecutor, "forget", keep)
    summary = serve_one(cfg, RAW, PagedModel(shape, weights, pool), tmp_path / "run")
    eng = summary["arms"]["engine"]
    assert eng["completed"] == 8 and eng["prefix_hit_rate"] > 0
    agree = total = 0
    for rid, out in outputs.items():
        seq = torch.tensor(np.concatenate([prompts[rid], out[:-1]]))
        ref = reference_logits(shape, weights, seq)[len(prompts[rid]) - 1 :].argmax(-1)
        agree += int((ref == torch.tensor(out)).sum())
        total += len(out)
    assert agree >= 0.95 * total, f"{agree}/{total} greedy tokens agree with the reference"
    rows = (tmp_path / "run" / "engine" / "requests.csv").read_text().splitlines()
    steps = (tmp_path / "run" / "engine" / "steps.csv").read_text().splitlines()
    assert len(steps) - 1 == eng["num_steps"] > 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["arms"]["engine"]
    cached = [int(r.split(",")[8]) for r in rows[1:]]
    assert max(cached) >= 32  # two full pages of a group's system prompt
