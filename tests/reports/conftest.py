"""Fixture runs for the report tests: tiny real simulations, written to disk like any run."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsched.experiment import run_experiment
from sim.config import parse_config

# KV pool per node, in tokens: about half the prompt groups fit, so cache-blind routing (every
# node caches every group) evicts and misses while prefix-affinity routing keeps its share resident.
POOL_TOKENS = 5000


def tiny_config(**overrides) -> dict:
    """4 small nodes, 128 requests of 16 prompt groups, open loop: a run takes well under a second."""
    cfg = {
        "name": "tiny",
        "seed": 1,
        "duration_s": 10,
        "model": "llama-3-8b",
        "node": {"num_gpus": 1, "tp": 1, "kv_memory_fraction": 0.9},
        "cluster": {"num_nodes": 4},
        "workload": {
            "name": "shared_prefix_groups",
            "params": {
                "num_groups": 16,
                "prompts_per_group": 8,
                "system_prompt_tokens": 512,
                "question_tokens": 32,
                "output_tokens": 8,
                "arrival": "poisson",
                "rate": 40,
            },
        },
        "arms": {"openclaw": {}, "paged+prefix": {}, "engine": {}},
    }
    cfg.update(overrides)
    base = parse_config({k: v for k, v in cfg.items() if k != "arms"})
    weights = base.model.num_params * base.model.dtype_bytes
    cfg["node"] = {
        **cfg["node"],
        "kv_memory_fraction": (weights + POOL_TOKENS * base.model.kv_bytes_per_token)
        / base.gpu.hbm_bytes,
    }
    return cfg


def make_run(path: Path, **overrides) -> Path:
    run_experiment(tiny_config(**overrides), path, show_progress=False, write_report=False)
    return path


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """openclaw, paged+prefix and engine on the tiny config (the engine evicts far less)."""
    return make_run(tmp_path_factory.mktemp("runs") / "tiny")
