"""Arm against arm in a sweep: per configuration of the other axes, the ratio of two arms' metrics.

A sweep whose `arm` axis holds both arms (e.g. `arm: [openclaw, engine]`) gives, for every value
combination of the other axes, a pair of points; the ratio says how many times better the first
arm is there: throughput as engine / openclaw, latencies as openclaw / engine (above 1 = engine
better). A pair where either side has no value (no request finished) has no ratio.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ARM_AXIS = "arm"
# ratio name -> (metric, +1: arm / baseline, -1: baseline / arm), label
RATIOS: dict[str, tuple[str, int, str]] = {
    "throughput_ratio": ("output_throughput", +1, "output throughput, x the baseline"),
    "p99_ttft_ratio": ("p99_ttft_ms", -1, "P99 TTFT, baseline / arm (x better)"),
}


def has_pair(configs: pd.DataFrame, arm: str, baseline: str) -> bool:
    return ARM_AXIS in configs and {arm, baseline} <= set(configs[ARM_AXIS].astype(str))


def arm_ratios(configs: pd.DataFrame, axes: list[str], arm: str, baseline: str) -> pd.DataFrame:
    """One row per value combination of `axes` (the config axes but `arm`): both arms' metrics
    and the RATIOS columns."""
    metrics = sorted({m for m, _, _ in RATIOS.values()} & set(configs.columns))
    keyed = configs.assign(**{a: configs[a].astype(str) for a in axes})
    mine = keyed[keyed[ARM_AXIS].astype(str) == arm].set_index(axes)[metrics]
    base = keyed[keyed[ARM_AXIS].astype(str) == baseline].set_index(axes)[metrics]
    both = mine.join(base, how="inner", suffixes=(f"_{arm}", f"_{baseline}"))
    for name, (metric, sense, _) in RATIOS.items():
        a, b = both[f"{metric}_{arm}"], both[f"{metric}_{baseline}"]
        ratio = a / b if sense > 0 else b / a
        both[name] = ratio.replace([np.inf, -np.inf], np.nan)
    return both.reset_index()


def cells_at_least(ratios: pd.DataFrame, name: str, threshold: float) -> pd.DataFrame:
    """The combinations where ratio `name` reaches `threshold`, best first."""
    hit = ratios[ratios[name] >= threshold]
    return hit.sort_values(name, ascending=False, kind="stable")
