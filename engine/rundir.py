"""An engine run directory in the simulator's schema, plus measured steps.

    <out>/config.json          the config as given
    <out>/engine/config.json   resolved config
    <out>/engine/requests.csv  sim.metrics.request_frame: one row per request
    <out>/engine/steps.csv     sim.steps.STEP_COLUMNS + engine.runner.ENGINE_STEP_COLUMNS
    <out>/engine/timeseries.csv  sim.metrics.SERIES_COLUMNS every sample_interval_s (runs after
                               round 3 of 2026-11-30; sampled between steps)
    <out>/engine/host_speed.csv  engine.host_probe.PROBE_COLUMNS: the host's speed over the run
                               (runs after session 11 of 2026-12-01)
    <out>/summary.json         {"arms": {"engine": metrics}, "latency_model": "measured:<device>", ...}
    <out>/run_info.json        wall time and date

The rows are sim's own writers', so `kvsched validate` and reports/ read an engine run as they
read a simulated one. The summary keeps sim.metrics.summarize's names and formulas for the
serving metrics (times in ms, throughputs per second of `duration_s`) plus step statistics.
"""

from __future__ import annotations

import json
import math
import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from engine import attention
from engine.host_probe import PROBE_COLUMNS
from engine.runner import ENGINE_STEP_COLUMNS
from sim import __version__
from sim.config import ConfigError
from sim.metrics import request_frame
from sim.rundir import MARKER, marker_text
from sim.sequence import Status
from sim.steps import STEP_COLUMNS

ARM = "engine"


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else math.nan


def _dist(name: str, x: np.ndarray) -> dict:
    return {
        f"mean_{name}": float(x.mean()) if x.size else math.nan,
        f"p50_{name}": _pct(x, 50),
        f"p90_{name}": _pct(x, 90),
        f"p99_{name}": _pct(x, 99),
    }


def steps_frame(result) -> pd.DataFrame:
    return pd.DataFrame(result.steps, columns=STEP_COLUMNS + ENGINE_STEP_COLUMNS)


def metrics(cfg, result, kv, num_preemptions: int) -> dict:
    done = [s for s in result.sequences if s.status is Status.FINISHED]
    arr = lambda f: np.array([f(s) for s in done], dtype=np.float64)  # noqa: E731
    ttft = arr(lambda s: (s.first_token_s - s.arrival_s) * 1e3)
    e2el = arr(lambda s: (s.finish_s - s.arrival_s) * 1e3)
    multi = [s for s in done if s.num_generated > 1]
    tpot = np.array([(s.finish_s - s.first_token_s) * 1e3 / (s.num_generated - 1) for s in multi])
    frame = steps_frame(result)
    steps = frame.duration_s.to_numpy() * 1e3
    out_tok, prompt_tok = sum(s.num_generated for s in done), sum(s.prompt_tokens for s in done)
    d = cfg.duration_s
    count = lambda st: sum(s.status is st for s in result.sequences)  # noqa: E731
    return {
        "completed": len(done),
        "failed": count(Status.FAILED),
        "unfinished": count(Status.UNFINISHED),
        "duration_s": d,
        "request_throughput": len(done) / d,
        "output_throughput": out_tok / d,
        "total_token_throughput": (out_tok + prompt_tok) / d,
        **_dist("ttft_ms", ttft),
        **_dist("tpot_ms", tpot),
        **_dist("e2el_ms", e2el),
        "prefix_hit_rate": sum(s.cached_tokens for s in done) / prompt_tok if prompt_tok else 0.0,
        "preemptions": num_preemptions,
        "evicted_pages": int(kv.cache.num_evicted_pages),
        "num_steps": len(result.steps),
        **_dist("step_ms", steps),
        "busy_share": float(steps.sum() / 1e3 / d),
        "mean_prep_ms": float(frame.prep_s.mean() * 1e3) if steps.size else 0.0,
        "mean_sched_ms": float(frame.sched_s.mean() * 1e3) if steps.size else 0.0,
        "wall_s": result.wall_s,
    }


def _device() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def _replaceable(path: Path) -> bool:
    """kvsched's output contract (docs/cli.md): only a directory kvsched marked may go."""
    return not path.exists() or (path.is_dir() and (path / MARKER).is_file())


def write_run(
    out_dir: Path, raw: dict, cfg, result, kv, num_preemptions: int, info: dict | None = None
) -> dict:
    tmp = out_dir.with_name(out_dir.name + ".partial")
    previous = out_dir.with_name(out_dir.name + ".previous")
    for path in (out_dir, tmp, previous):
        if not _replaceable(path):
            raise ConfigError(
                f"--out: {path} exists and was not written by kvsched; choose another"
            )
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / ARM).mkdir(parents=True)
    (tmp / MARKER).write_text(marker_text("run", __version__))
    _json(tmp / "config.json", raw)
    _json(tmp / ARM / "config.json", cfg.model_dump(mode="json"))
    frame = request_frame(result.sequences, ARM)
    frame.to_csv(tmp / ARM / "requests.csv", index=False, float_format="%.6f")
    steps_frame(result).to_csv(tmp / ARM / "steps.csv", index=False, float_format="%.6f")
    if result.series is not None:  # the simulator's per-node samples (KV usage, queues)
        result.series.series().to_csv(
            tmp / ARM / "timeseries.csv", index=False, float_format="%.6f"
        )
    if result.host_speed:  # engine/host_probe.py: the host's speed over the run
        pd.DataFrame(result.host_speed, columns=PROBE_COLUMNS).to_csv(
            tmp / ARM / "host_speed.csv", index=False, float_format="%.7f"
        )
    summary = {
        "arms": {ARM: metrics(cfg, result, kv, num_preemptions)},
        "latency_model": f"measured:{_device()}",
        "latency_models": {ARM: f"measured:{_device()}"},
        "prefill_backend": attention.PREFILL_BACKEND,
        "seed": cfg.seed,
        "name": cfg.name,
    }
    _json(tmp / "summary.json", summary)
    date = datetime.now(UTC).isoformat(timespec="seconds")
    _json(tmp / "run_info.json", {"wall_s": round(result.wall_s, 3), "date": date, **(info or {})})
    # The run it replaces is moved aside, not deleted, until the new one is in place: a signal
    # between the two renames leaves both (marked) on disk, never neither.
    shutil.rmtree(previous, ignore_errors=True)
    if out_dir.exists():
        out_dir.rename(previous)
    tmp.rename(out_dir)
    shutil.rmtree(previous, ignore_errors=True)
    return summary


def _json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
