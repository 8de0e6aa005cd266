"""Sweep fixtures: a tiny base config (one small node, a few simulated seconds) and sweep files."""

from __future__ import annotations

import pytest
import yaml


@pytest.fixture
def tiny_base() -> dict:
    return {
        "name": "tiny",
        "seed": 1,
        "duration_s": 2,
        "model": "llama-3-8b",
        "node": {"num_gpus": 1, "tp": 1},
        "cluster": {"num_nodes": 1},
        "workload": {
            "name": "seed",
            "params": {
                "num_clients": 4,
                "input_min": 64,
                "input_max": 256,
                "long_share": 0.0,
                "system_prompt_tokens": 64,
                "output_min": 4,
                "output_max": 8,
            },
        },
    }


@pytest.fixture
def write_sweep(tmp_path):
    def write(data: dict, name: str = "sweep.yaml") -> str:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return str(path)

    return write
