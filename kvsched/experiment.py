"""Run an experiment: resolve its arms, simulate each, write the run directory.

Run directory layout (what `reports/` reads; nothing else):
  config.json              the experiment config as given (arms = the overrides of the arms run)
  <arm>/config.json        the arm's fully resolved config
  <arm>/requests.csv       one row per request (metrics.REQUEST_COLUMNS)
  <arm>/timeseries.csv     per-node samples every sample_interval_s (metrics.SERIES_COLUMNS)
  <arm>/evictions.csv      evicted pages by prefix position (power-of-two token buckets), per node
  summary.json             {"arms": {arm: metrics}, "latency_model", "latency_models" (per arm), "seed", "version", ...}
  run_info.json            wall time and date (kept out of summary.json so it stays byte-identical)
  .kvsched-run             the marker: kvsched made this directory (kvsched/outdir.py)
The directory is built under `<out>.partial` and renamed when complete, with `<out>` locked
meanwhile, so a failed or interrupted run never leaves a directory that looks finished, and
kvsched replaces only an earlier run (docs/cli.md).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from kvsched.outdir import (
    MARKER,
    PARTIAL_SUFFIX,
    check_writable,
    clear_partial,
    make_dir,
    output_lock,
    remove_created,
    replace_dir,
)
from policies import make_policy
from policies.registry import CONFIG_KINDS
from sim import __version__
from sim.cluster import Cluster
from sim.config import ConfigError, ExperimentConfig, deep_merge, parse_config
from sim.metrics import eviction_frame, request_frame, summarize
from sim.rundir import arm_dir_name
from sim.steps import events_frame, steps_frame
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
    # The engine whose decode kernel reads a shared prefix once per batch group (the article's
    # "after a hit, decode reads less"; kernels/cascade_decode.py, priced by sim/cascade.py).
    "engine+cascade": {
        "cache": {"mechanism": "paged", "prefix_cache": True, "protected_zone": True},
        "node": {"decode_attention": "cascade"},
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
    for name in names:
        if name not in allowed:
            raise ConfigError(f"--arms: unknown arm {name!r}; allowed: {', '.join(allowed)}")
    _check_arm_dirs(list(dict.fromkeys([*overrides, *names])))
    arms = {}
    # Every arm the config defines is validated, not only those --arms selects.
    for name in dict.fromkeys([*overrides, *names]):
        arm_override = deep_merge(BUILTIN_ARMS.get(name, {}), overrides.get(name, {}))
        merged = deep_merge({k: v for k, v in raw.items() if k != "arms"}, arm_override)
        arms[name] = parse_config(merged, source=f"arms.{name}")
        _check_names(arms[name], f"arms.{name}")
    return {name: arms[name] for name in names}


# Names a run directory holds beside its arm folders; an arm may not take one of them.
_RUN_FILES = {"config.json", "summary.json", "run_info.json", "report.html", MARKER}


def _check_arm_dirs(names: list[str]) -> None:
    """Each arm gets its own folder: names that map to the same folder (`a/b` and `a_b`, or
    names differing in case only), dot-only names or the run's own file names are refused."""
    folder_to_arm: dict[str, str] = {}
    for name in names:
        if not isinstance(name, str):
            raise ConfigError(f"arms: arm names must be text, not {name!r}")
        folder = arm_dir_name(name)
        if set(folder) <= {"."} or folder in _RUN_FILES or folder.startswith("."):
            raise ConfigError(f"arms.{name}: not usable as a folder name; rename the arm")
        if folder.lower() in folder_to_arm:
            other = folder_to_arm[folder.lower()]
            raise ConfigError(
                f"arms.{name}: same folder {folder!r} as arm {other!r}; rename one of them"
            )
        folder_to_arm[folder.lower()] = name


def _check_names(cfg: ExperimentConfig, source: str) -> None:
    """Build every named policy and the workload once, so a bad name or parameter fails before any run."""
    try:
        for kind in CONFIG_KINDS:
            make_policy(kind, getattr(cfg.policies, kind), np.random.default_rng(0))
        make_workload(cfg.workload.name, cfg.workload.params, np.random.default_rng(0))
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None


def run_arm(
    cfg: ExperimentConfig, arm: str, show_progress: bool = True, on_progress=None
) -> tuple[Cluster, dict, pd.DataFrame, pd.DataFrame]:
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
        if on_progress is not None:
            on_progress(t)

    cluster.run(progress)
    bar.close()
    requests = request_frame(cluster.sequences, arm)
    if workload.request_labels is not None:  # the trace's own ids, kept as text
        requests["request_id"] = requests["request_id"].map(workload.request_labels)
    series = cluster.recorder.series()
    return cluster, summarize(requests, series, cluster), requests, series


def run_experiment(
    raw: dict,
    out_dir: str | Path,
    arms: list[str] | None = None,
    show_progress: bool = True,
    write_report: bool = True,
    workers: int | None = 1,
) -> dict:
    """Simulate the arms and write the run directory. `workers` > 1 runs that many arms at once,
    each in its own process (kvsched/arm_pool.py; None: one per CPU); the files are the same
    either way."""
    configs = resolve_arms(raw, arms)
    if workers is None:
        from kvsched.arm_pool import default_workers

        workers = default_workers(len(configs))
    out = Path(os.path.abspath(out_dir))
    check_writable(out, "run")
    created = make_dir(out.parent, "parent")
    try:
        with output_lock(out):
            check_writable(out, "run")  # again, now that no other kvsched writes it
            tmp = out.with_name(out.name + PARTIAL_SUFFIX)
            clear_partial(tmp)
            created += make_dir(tmp, "run")
            try:
                summary = _write_run(raw, configs, tmp, show_progress, write_report, workers)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            replace_dir(tmp, out)
    except BaseException:
        remove_created(created)
        raise
    return summary


def write_arm(
    cfg: ExperimentConfig, arm: str, run_dir: Path, show_progress: bool = True, progress=None
) -> tuple[dict, str]:
    """Simulate one arm and write its folder in `run_dir`; its metrics and latency model's name.
    `progress(t)`, if given, hears the simulated time as the run goes (a worker's parent)."""
    cluster, metrics, requests, series = run_arm(cfg, arm, show_progress, progress)
    arm_dir = run_dir / arm_dir_name(arm)
    arm_dir.mkdir()
    _write_json(arm_dir / "config.json", cfg.model_dump(mode="json"))
    requests.to_csv(arm_dir / "requests.csv", index=False, float_format="%.6f")
    series.to_csv(arm_dir / "timeseries.csv", index=False, float_format="%.6f")
    eviction_frame(cluster, arm).to_csv(arm_dir / "evictions.csv", index=False)
    if cluster.step_rows is not None:  # record_steps: the timeline's and validate's input
        steps_frame(cluster.step_rows).to_csv(
            arm_dir / "steps.csv", index=False, float_format="%.9f"
        )
        events_frame(cluster.event_rows).to_csv(
            arm_dir / "events.csv", index=False, float_format="%.9f"
        )
    return metrics, cluster.latency.name


def _write_run(
    raw: dict,
    configs: dict[str, ExperimentConfig],
    tmp: Path,
    show_progress: bool,
    report: bool,
    workers: int,
) -> dict:
    started = time.perf_counter()
    raw_out = {**raw, "arms": {a: (raw.get("arms") or {}).get(a, {}) for a in configs}}
    _write_json(tmp / "config.json", raw_out)
    summary: dict = {"arms": {}, "latency_models": {}}
    if workers > 1 and len(configs) > 1:
        from kvsched.arm_pool import run_arms_in_processes

        outcomes = run_arms_in_processes(configs, tmp, workers, show_progress)
    else:
        outcomes = {arm: write_arm(cfg, arm, tmp, show_progress) for arm, cfg in configs.items()}
    for arm in configs:  # the config's order, however the arms finished
        summary["arms"][arm], summary["latency_models"][arm] = outcomes[arm]
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
    if report:
        from reports.html import write_report as _write_report

        _write_report([tmp], tmp / "report.html")
    return summary


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
