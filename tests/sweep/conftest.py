"""Sweep fixtures: a tiny base config (one small node, a few simulated seconds) and sweep files."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import tiny_config


@pytest.fixture
def tiny_base() -> dict:
    return tiny_config(duration_s=2)


@pytest.fixture
def write_sweep(tmp_path):
    def write(data: dict, name: str = "sweep.yaml") -> str:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return str(path)

    return write
