"""Arm-vs-arm ratios of a sweep: per configuration of the other axes, exact."""

from __future__ import annotations

import pandas as pd
import pytest

from reports.sweep_ratios import arm_ratios, cells_at_least, has_pair


def _configs() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arm": ["openclaw", "engine", "openclaw", "engine"],
            "pool": [20e9, 20e9, 110e9, 110e9],
            "output_throughput": [100.0, 600.0, 500.0, 600.0],
            "p99_ttft_ms": [9000.0, 1000.0, 2000.0, 1000.0],
        }
    )


def test_ratios_pair_the_arms_per_configuration():
    configs = _configs()
    assert has_pair(configs, "engine", "openclaw") and not has_pair(configs, "paged", "openclaw")
    r = arm_ratios(configs, ["pool"], "engine", "openclaw").set_index("pool")
    assert r.loc["20000000000.0", "throughput_ratio"] == pytest.approx(6.0)
    assert r.loc["20000000000.0", "p99_ttft_ratio"] == pytest.approx(9.0)  # baseline / engine
    assert r.loc["110000000000.0", "throughput_ratio"] == pytest.approx(1.2)
    hits = cells_at_least(r.reset_index(), "throughput_ratio", 5.0)
    assert hits.pool.tolist() == ["20000000000.0"]


def test_a_zero_baseline_gives_no_ratio():
    configs = _configs()
    configs.loc[0, "output_throughput"] = 0.0
    r = arm_ratios(configs, ["pool"], "engine", "openclaw")
    assert r.throughput_ratio.isna().tolist() == [True, False]
