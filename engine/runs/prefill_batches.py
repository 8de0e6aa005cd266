"""A step's prefill chunks run in one launch: the layouts to time, and how the price compares.

    python engine/runs/prefill_batches.py layouts OUT.json      # what the device times
    python engine/runs/prefill_batches.py compare MEASURED.json # model vs measured

The engine runs every prefill chunk of a step (new tokens over each request's cached context) in
one paged prefill launch; the calibration's prefill table is measured one chunk per launch and
the simulator prices a step's chunks as the sum of their table times. `layouts` writes, per
attention shard, the chunk lists `python -m engine.check --only prefill_batches --layouts FILE`
times: a grid (1-8 equal chunks of 32-2,048 new tokens over 0-16K of context) and the steps with
a chunk the committed engine runs served (every `STRIDE`-th of each run). `compare` prints the
measured one-launch time over the sum of the chunks alone, and each pricing's error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

RUNS = Path(__file__).resolve().parent
GRID_CHUNKS = (1, 2, 4, 8)
GRID_NEW = (32, 128, 512, 2048)
GRID_CTX = (0, 2048, 8192, 16384)
SERVED_PER_RUN = 24
# The runs whose steps are sampled, per shard (engine/check.py SHARED_SHARDS' names)
SERVED = {
    "llama-3-8b": ("seed_1node", "multi_turn", "shared_prefix", "azure_conv", "overhead_probe"),
    "article-70b-tp2": ("article70b_tp2_shared_prefix", "article70b_tp2_overhead_probe"),
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("layouts", "compare"))
    ap.add_argument("file", type=Path)
    args = ap.parse_args()
    if args.what == "layouts":
        args.file.write_text(json.dumps(layouts()) + "\n")
        print(f"{args.file}: {sum(len(v['steps']) for v in layouts().values())} steps")
    else:
        compare(json.loads(args.file.read_text()))


if __name__ == "__main__":
    sys.exit(main())
