"""A sweep directory read back: configurations (mean over seeds), Pareto fronts, best per objective.

Reads only what `kvsched sweep` wrote (sweep.json, sweep.csv), so it runs without simulating.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

SEED_AXIS = "seed"  # averaged over: a configuration is every axis but the seed

# name -> (metric, sense, label)
OBJECTIVES: dict[str, tuple[str, str, str]] = {
    "throughput": ("output_throughput", "max", "output throughput (tok/s)"),
    "p99_ttft": ("p99_ttft_ms", "min", "P99 TTFT (ms)"),
    "hit_rate": ("prefix_hit_rate", "max", "prefix hit rate"),
    "p99_tpot": ("p99_tpot_ms", "min", "P99 TPOT (ms)"),
}
# Metrics plotted over the axes, with their labels.
HEADLINE: dict[str, str] = {
    "output_throughput": "output throughput (tok/s)",
    "p99_ttft_ms": "P99 TTFT (ms)",
    "prefix_hit_rate": "prefix hit rate",
    "p99_tpot_ms": "P99 TPOT (ms)",
    "mean_ttft_ms": "mean TTFT (ms)",
    "peak_kv_bytes": "peak KV (bytes)",
    "preemptions": "preemptions",
    "evicted_pages": "evicted pages",
}


@dataclass
class SweepData:
    name: str
    plan: dict
    table: pd.DataFrame  # one row per finished point (sweep.csv)
    axes: list[str]

    @property
    def config_axes(self) -> list[str]:
        """Axes that define a configuration (all but the seed)."""
        return [a for a in self.axes if a != SEED_AXIS]

    @property
    def ok(self) -> pd.DataFrame:
        return self.table[self.table.status == "ok"]

    def config_of(self, point_index: int) -> dict:
        return next(p for p in self.plan["points"] if p["index"] == point_index)


def load_sweep_dir(path: str | Path) -> SweepData:
    path = Path(path)
    plan = json.loads((path / "sweep.json").read_text())
    # Only an empty cell is missing: "null" is an axis value (kvsched.sweep_store.cell).
    table = pd.read_csv(path / "sweep.csv", keep_default_na=False, na_values=[""])
    return SweepData(plan["spec"]["name"], plan, table, list(plan["spec"]["axes"]))


def configurations(data: SweepData) -> pd.DataFrame:
    """Ok points grouped by configuration: metric means over seeds, `seeds` (count) and `point`
    (the first point of the group, whose config represents it)."""
    ok = data.ok
    metrics = [
        c for c in ok.columns if c in _metric_columns(data) and pd.api.types.is_numeric_dtype(ok[c])
    ]
    keys = data.config_axes
    if not keys:  # only a seed axis: one configuration
        ok = ok.assign(_all=0)
        keys = ["_all"]
    grouped = ok.groupby(keys, sort=False, dropna=False)
    out = grouped[metrics].mean()
    out["seeds"] = grouped.size()
    out["point"] = grouped["point"].min()
    return (
        out.reset_index()
        .drop(columns=["_all"], errors="ignore")
        .sort_values("point", kind="stable")
    )


def _metric_columns(data: SweepData) -> list[str]:
    fixed = {"point", "status", "latency_model", "wall_s", "error", "point_id", *data.axes}
    return [c for c in data.table.columns if c not in fixed]


def pareto_front(df: pd.DataFrame, x: str, x_sense: str, y: str, y_sense: str) -> pd.DataFrame:
    """Rows no other row beats on both x and y (each `max` or `min`), ordered by y from best."""
    sign_x = 1 if x_sense == "max" else -1
    sign_y = 1 if y_sense == "max" else -1
    rows = df.dropna(subset=[x, y])
    order = rows.assign(_y=-sign_y * rows[y], _x=-sign_x * rows[x]).sort_values(
        ["_y", "_x", "point"], kind="stable"
    )
    front, best_x = [], None
    for idx, row in order.iterrows():
        value = sign_x * row[x]
        if best_x is None or value > best_x:
            front.append(idx)
            best_x = value
    return df.loc[front]


def best_by(df: pd.DataFrame, objective: str) -> dict | None:
    """The configuration that is best on one objective; ties go to the lower point index."""
    metric, sense, _ = OBJECTIVES[objective]
    rows = df.dropna(subset=[metric]) if metric in df else df.iloc[:0]
    if rows.empty:
        return None
    ordered = rows.sort_values([metric, "point"], ascending=[sense == "min", True], kind="stable")
    return records(ordered.iloc[:1])[0]


def records(df: pd.DataFrame) -> list[dict]:
    """Rows as dicts with each column's own type (a row Series would turn ints into floats)."""
    return df.to_dict("records")


def axis_values_text(data: SweepData, row: dict) -> str:
    return ", ".join(f"{a}={row[a]}" for a in data.config_axes) or "(the base config)"


def pasteable_yaml(data: SweepData, point_index: int) -> str:
    """The point's full config as YAML that `kvsched run --config` runs as exactly this point
    (under a custom arm name with no overrides; a built-in arm would re-apply its overrides)."""
    point = data.config_of(point_index)
    config = {**point["config"], "arms": {f"{point['arm']}-tuned": {}}}
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=None, width=100)
