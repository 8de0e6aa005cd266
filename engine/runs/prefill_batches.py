"""A step's prefill chunks run in one launch: the layouts to time, and how the price compares.

    python engine/runs/prefill_batches.py layouts OUT.json      # what the device times
    python engine/runs/prefill_batches.py compare MEASURED.json # one launch vs chunks alone
    python engine/runs/prefill_batches.py fit MEASURED.json [--write]

The engine runs every prefill chunk of a step (new tokens over each request's cached context) in
one paged prefill launch; the calibration's prefill table is measured one chunk per launch and
the simulator prices a step's chunks as the sum of their table times. `layouts` writes, per
attention shard, the chunk lists `python -m engine.check --only prefill_batches --layouts FILE`
times: a grid (1-8 equal chunks of 32-2,048 new tokens over 0-16K of context) and the steps with
a chunk the committed engine runs served (every `STRIDE`-th of each run). `compare` prints the
measured one-launch time over the sum of the chunks alone. `fit` fits sim/latency/prefill_batch.py's
launch model per shard to the grid and the single chunks (steps of at most STEP_TOKENS new
tokens), prints its error there and on the served steps with 2 or more chunks (held out) beside
the sum's, and with --write stores it as the calibration file's `prefill_batches` entry.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from engine.check import SHARED_SHARDS as SHARDS
from sim.config import GpuConfig, ModelConfig
from sim.latency.base import StepShape
from sim.latency.calibrated import calibrated_latency_for
from sim.latency.factory import CALIBRATION_DIR
from sim.latency.prefill_batch import COEFFICIENTS, fit_prefill_batch
from sim.presets import GPU_PRESETS, MODEL_PRESETS

RUNS = Path(__file__).resolve().parent
ROOT = RUNS.parents[1]
CALIBRATION = CALIBRATION_DIR / "h200.json"
STEP_TOKENS = 8192  # the engine runs' step budget: no step holds more new tokens
BLOCK_M = 128  # kernels/paged_prefill DEFAULT_PREFILL_CONFIG["block_m"] (the engine's plan)
GRID_CHUNKS = (1, 2, 4, 8)
GRID_NEW = (32, 128, 512, 2048)
GRID_CTX = (0, 2048, 8192, 16384)
SERVED_PER_RUN = 24
# The runs whose steps are sampled, per shard (engine/check.py SHARED_SHARDS' names)
# (round 5's runs: the layouts timed were drawn from them)
SERVED = {
    "llama-3-8b": tuple(
        f"round5/{run}"
        for run in ("seed_1node", "multi_turn", "shared_prefix", "azure_conv", "overhead_probe")
    ),
    "article-70b-tp2": (
        "round5/article70b_tp2_shared_prefix",
        "round5/article70b_tp2_overhead_probe",
    ),
}


def step_chunks(cell: str) -> list[list[int]]:
    """steps.csv's prefill_chunks ("new@context;...") as [new, context] pairs."""
    return [[int(n), int(c)] for n, c in (part.split("@") for part in cell.split(";"))]


def served_steps(run: str, count: int = SERVED_PER_RUN) -> list[list[list[int]]]:
    """`count` steps with a prefill chunk of the run, evenly spaced over the run."""
    steps = pd.read_csv(RUNS / run / "engine" / "steps.csv")
    with_chunks = steps[steps.num_prefill > 0].prefill_chunks.tolist()
    at = np.linspace(0, len(with_chunks) - 1, min(count, len(with_chunks))).round().astype(int)
    return [step_chunks(with_chunks[i]) for i in dict.fromkeys(at.tolist())]


def layouts() -> dict:
    grid = [
        [[n, c]] * k for k in GRID_CHUNKS for n in GRID_NEW for c in GRID_CTX
    ]  # fmt: skip
    out = {}
    for shard, runs in SERVED.items():
        served = {run: served_steps(run) for run in runs}
        out[shard] = {
            "steps": grid + [s for steps in served.values() for s in steps],
            "served_from": {run: len(steps) for run, steps in served.items()},
        }
    return out


def compare(measured: dict) -> None:
    for shard, rows in measured.items():
        if not isinstance(rows, list):
            continue
        ratio = np.array([r["batched_ms"] / sum(r["alone_ms"]) for r in rows])
        k = np.array([len(r["chunks"]) for r in rows])
        print(f"{shard}: {len(rows)} steps")
        for chunks in sorted(set(k.tolist())):
            m = k == chunks
            print(f"  {chunks} chunks: one launch / sum alone median {np.median(ratio[m]):.3f}"
                  f" (min {ratio[m].min():.3f}, max {ratio[m].max():.3f}, n {m.sum()})")  # fmt: skip


def _summary(errors: np.ndarray) -> dict:
    e = np.abs(errors)
    return {
        "points": int(e.size),
        "median_abs_err": round(float(np.median(e)), 4),
        "p90_abs_err": round(float(np.percentile(e, 90)), 4),
        "max_abs_err": round(float(e.max()), 4),
        "median_signed_err": round(float(np.median(errors)), 4),
    }


def shard_model(shard: str) -> tuple[ModelConfig, int]:
    """The model preset and TP degree of an attention shard of engine/check.py."""
    name, tp = SHARDS[shard]
    return ModelConfig(name=name, **MODEL_PRESETS[name]), tp


def table_ms(shard: str) -> Callable[[int, int], float]:
    """One layer's prefill price of one chunk (new tokens, context) from the calibration's
    table, as the simulator prices it (the default pricing, one chunk per launch)."""
    model, tp = shard_model(shard)
    latency = calibrated_latency_for(model, GpuConfig(**GPU_PRESETS["h200"]), tp, CALIBRATION_DIR)
    assert latency is not None
    return lambda n, c: (
        latency.parts(StepShape([n], [c], 0, 0))["prefill_attn_s"] * 1e3 / (model.num_layers)
    )


def fit_shard(shard: str, rows: list[dict], grid_size: int, sms: int) -> dict:
    """The launch model fitted to the shard's grid steps and their chunks alone (none of the
    served steps' timings), judged on its served steps of 2+ chunks as the simulator prices
    them (the model, never below the costliest chunk's table price) and as the table's sum."""
    model_cfg, tp = shard_model(shard)
    heads = (model_cfg.num_q_heads // tp, model_cfg.num_kv_heads // tp)
    grid = [r for r in rows[:grid_size] if sum(n for n, _ in r["chunks"]) <= STEP_TOKENS]
    alone = {tuple(c): ms for r in grid for c, ms in zip(r["chunks"], r["alone_ms"], strict=True)}
    points = [(r["chunks"], r["batched_ms"]) for r in grid if len(r["chunks"]) > 1]
    points += [([chunk], ms) for chunk, ms in alone.items()]
    model, fit_err = fit_prefill_batch(points, heads[0] // heads[1], heads[1], BLOCK_M, sms)
    served = [r for r in rows[grid_size:] if len(r["chunks"]) > 1]
    table = table_ms(shard)

    def priced(chunks) -> float:
        alone_prices = [table(n, c) for n, c in chunks]
        return max(model.ms([n for n, _ in chunks], [c for _, c in chunks]), max(alone_prices))

    measured = np.array([r["batched_ms"] for r in served])
    return {
        "shard": shard,
        "q_heads": heads[0],
        "kv_heads": heads[1],
        "head_dim": model_cfg.head_dim,
        "block_m": BLOCK_M,
        "sms": sms,
        **dict(zip(COEFFICIENTS, (round(v, 6) for v in model.coef), strict=True)),
        "fit": _summary(fit_err),
        "held_out_served": _summary(np.array([priced(r["chunks"]) for r in served]) / measured - 1),
        "table_sum_served": _summary(
            np.array([sum(table(n, c) for n, c in r["chunks"]) for r in served]) / measured - 1
        ),
    }


def fit(path: Path, write: bool) -> None:
    measured = json.loads(path.read_text())
    calibration = json.loads(CALIBRATION.read_text())
    grid_size = len(GRID_CHUNKS) * len(GRID_NEW) * len(GRID_CTX)
    entries = [
        {
            **fit_shard(shard, rows, grid_size, int(calibration["sm_count"])),
            "measured": str(path.resolve().relative_to(ROOT)),
        }  # fmt: skip
        for shard, rows in measured.items()
        if shard in SHARDS
    ]
    for e in entries:
        print(f"{e['shard']}: fit {e['fit']}\n  served, held out: {e['held_out_served']}"
              f"\n  served, table sum: {e['table_sum_served']}")  # fmt: skip
    if write:
        calibration["prefill_batches"] = entries
        CALIBRATION.write_text(json.dumps(calibration, indent=1) + "\n")
        print(f"wrote prefill_batches to {CALIBRATION.relative_to(ROOT)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("layouts", "compare", "fit"))
    ap.add_argument("file", type=Path)
    ap.add_argument("--write", action="store_true", help="fit: store it in the calibration file")
    args = ap.parse_args()
    if args.what == "layouts":
        out = layouts()
        args.file.write_text(json.dumps(out) + "\n")
        print(f"{args.file}: {sum(len(v['steps']) for v in out.values())} steps")
    elif args.what == "compare":
        compare(json.loads(args.file.read_text()))
    else:
        fit(args.file, args.write)


if __name__ == "__main__":
    main()
