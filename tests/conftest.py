"""Shared fixtures."""

from __future__ import annotations

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (CI must not turn red by chance); a new
# search is one `--hypothesis-seed` or profile away.
settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.load_profile("deterministic")


@pytest.fixture
def tiny_config() -> dict:
    """One small node (Llama-3-8B on one H200), short run; override fields per test."""
    return {
        "name": "tiny",
        "seed": 1,
        "duration_s": 10,
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
