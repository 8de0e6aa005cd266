"""Run an experiment: resolve its arms, simulate each, write the run directory.

Run directory layout (what `reports/` reads; nothing else):
  config.json              the experiment config as given (arms = the overrides of the arms run)
  <arm>/config.json        the arm's fully resolved config
  <arm>/requests.csv       one row per request (metrics.REQUEST_COLUMNS)
  <arm>/timeseries.csv     per-node samples every sample_interval_s (metrics.SERIES_COLUMNS)
  <arm>/evictions.csv      evicted pages by prefix position (power-of-two token buckets), per node
  summary.json             {"arms": {arm: metrics}, "latency_model", "latency_models" (per arm), "seed", "version", ...}
  run_info.json            wall time and date (kept out of summary.json so it stays byte-identical)
The directory is built under a temporary name and renamed when complete, so a failed or
interrupted run never leaves a directory that looks finished.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from tqdm import tqdm

from policies import make_policy
from sim import __version__
from sim.cluster import Cluster
from sim.config import ConfigError, ExperimentConfig, deep_merge, parse_config
from sim.metrics import eviction_frame, request_frame, summarize
from sim.rundir import arm_dir_name
from workloads.registry import make_workload

_ROUND_ROBIN = {"routing": {"name": "round_robin", "params": {}}}
BUILTIN_ARMS: dict[str, dict] = {
    # The article's baseline: contiguous max-length reservation, no reuse, cache-blind routing.
    "openclaw": {
        "cache": {"mechanism": "contiguous", "prefix_cache": False},
        "policies": _ROUND_ROBIN,
    },
    "paged": {"cache": {"mechanism": "paged", "prefix_cache": False}, "policies": _ROUND_ROBIN},
    "paged+prefix": {
        "cache": {"mechanism": "paged", "prefix_cache": True},
        "policies": _ROUND_ROBIN,
    },
    # The engine: paged + prefix cache + same-prefix-same-node routing with the 90% load fallback,
    # scored eviction + protected zone + admission threshold (docs/cache.md).
    "engine": {
        "cache": {"mechanism": "paged", "prefix_cache": True, "protected_zone": True},
        "policies": {
            "routing": {"name": "prefix_affinity", "params": {}},
            "eviction": {"name": "scored"},
            "admission": {"name": "threshold"},
        },
    },
}


def resolve_arms(raw: dict, selected: list[str] | None = None) -> dict[str, ExperimentConfig]:
    """Base config + each arm's overrides, validated; errors name the arm and the field."""
    base = parse_config(raw)
    _check_names(base, "config")
    overrides = raw.get("arms") or {}
    names = selected or list(overrides) or list(BUILTIN_ARMS)
    allowed = list(dict.fromkeys([*BUILTIN_ARMS, *overrides]))
    arms = {}
    for name in names:
        if name not in allowed:
            raise ConfigError(f"--arms: unknown arm {name!r}; allowed: {', '.join(allowed)}")
        arm_override = deep_merge(BUILTIN_ARMS.get(name, {}), overrides.get(name, {}))
        merged = deep_merge({k: v for k, v in raw.items() if k != "arms"}, arm_override)
        arms[name] = parse_config(merged, source=f"arms.{name}")
        _check_names(arms[name], f"arms.{name}")
    return arms


def _check_names(cfg: ExperimentConfig, source: str) -> None:
    """Build every named policy and the workload once, so a bad name or parameter fails before any run."""
    try:
        for kind in ("routing", "eviction", "admission"):
            make_policy(kind, getattr(cfg.policies, kind), np.random.default_rng(0))
        make_workload(cfg.workload.name, cfg.workload.params, np.random.default_rng(0))
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None


def run_arm(
    cfg: ExperimentConfig, arm: str, show_progress: bool = True
) -> tuple[Cluster, dict, object, object]:
    workload = make_workload(
        cfg.workload.name, cfg.workload.params, np.random.default_rng([cfg.seed, 0])
    )
    cluster = Cluster(cfg, workload, np.random.default_rng([cfg.seed, 1]), make_policy)
    bar = tqdm(
        total=cfg.duration_s,
        desc=f"{arm:>14}",
        unit="sim-s",
        disable=not show_progress,
        bar_format="{desc} {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} sim-s [{elapsed}<{remaining}]",
    )

    def progress(t: float) -> None:
        bar.update(t - bar.n)

    cluster.run(progress)
    bar.close()
    requests = request_frame(cluster, arm)
    series = cluster.recorder.series()
    return cluster, summarize(requests, series, cluster), requests, series


def run_experiment(
    raw: dict,
    out_dir: str | Path,
    arms: list[str] | None = None,
    show_progress: bool = True,
    write_report: bool = True,
) -> dict:
    configs = resolve_arms(raw, arms)
    out_dir = check_out_dir(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    started = time.perf_counter()
    try:
        raw_out = {**raw, "arms": {a: (raw.get("arms") or {}).get(a, {}) for a in configs}}
        _write_json(tmp / "config.json", raw_out)
        summary: dict = {"arms": {}}
        for arm, cfg in configs.items():
            cluster, metrics, requests, series = run_arm(cfg, arm, show_progress)
            arm_dir = tmp / arm_dir_name(arm)
            arm_dir.mkdir()
            _write_json(arm_dir / "config.json", cfg.model_dump(mode="json"))
            requests.to_csv(arm_dir / "requests.csv", index=False, float_format="%.6f")
            series.to_csv(arm_dir / "timeseries.csv", index=False, float_format="%.6f")
            eviction_frame(cluster, arm).to_csv(arm_dir / "evictions.csv", index=False)
            summary["arms"][arm] = metrics
            summary.setdefault("latency_models", {})[arm] = cluster.latency.name
        models = sorted(set(summary["latency_models"].values()))
        summary["latency_model"] = models[0] if len(models) == 1 else "mixed: " + ", ".join(models)
        summary.update(
            seed=next(iter(configs.values())).seed,
            name=next(iter(configs.values())).name,
            version=__version__,
        )
        _write_json(tmp / "summary.json", summary)
        _write_json(
            tmp / "run_info.json",
            {
                "wall_s": round(time.perf_counter() - started, 3),
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        )
        if write_report:
            from reports.html import write_report as _write_report

            _write_report([tmp], tmp / "report.html")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return summary


def check_out_dir(path: str | Path) -> Path:
    """The run directory may be new, empty, or an earlier run (replaced); never anything else."""
    out = Path(path).resolve()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out: {path} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / "summary.json").is_file():
        raise ConfigError(
            f"--out: {path} exists and is not a kvsched run directory; choose a new path"
        )
    if out.parent == out:
        raise ConfigError(f"--out: {path} is the filesystem root")
    return out


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
