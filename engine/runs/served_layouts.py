"""The decode-only batches engine runs served, as block tables `engine.check --only
decode_served` times on the H200.

    python engine/runs/served_layouts.py OUT.json [--per-run 30] [--real-ids] [--runs RUN ...]

Each run is replayed (kvsched.validate.replay: sim's scheduler and KV cache re-driven with the
engine's queue, the engine's own decisions and pages) and a seeded sample of its decode-only
steps of two or more decodes is kept: per decode its context (as a step's shape counts it) and
its block table, page ids renumbered in first-seen order (so pages the step's decodes share keep
the same index) and stored as [first, count] runs; the step's row in steps.csv (`step`); with
--real-ids also the pool's own page ids (`ids`). `logs/2026-11-30_served_batches/layouts.json`
came from round 4, `layouts_round5_ids.json` from round 5, `layouts_round7_ids.json` from round 7
(the probes too).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import kvsched.validate as validate
from engine.check import step_layout
from sim.scheduler import Step

RUNS = Path(__file__).resolve().parent
# run -> the attention shard its decodes ran on (engine.check.SHARED_SHARDS)
SERVED = {
    "seed_1node": "llama-3-8b",
    "multi_turn": "llama-3-8b",
    "shared_prefix": "llama-3-8b",
    "azure_conv": "llama-3-8b",
    "overhead_probe": "llama-3-8b",
    "host_probe": "llama-3-8b",
    "article70b_tp2_shared_prefix": "article-70b-tp2",
}


def decode_batches(run_dir: Path) -> list[tuple[int, list[tuple[list[int], int]]]]:
    """Every decode-only step of two or more decodes the replay plans: (its row in steps.csv,
    its decodes as (pages, context))."""
    run = validate.load_engine_run(run_dir)
    batches = []

    def record(k: int, step: Step) -> None:
        items = step.items
        decodes = [(list(seq.pages), seq.num_computed + 1) for seq, _, pre in items if not pre]
        if len(decodes) == len(items) >= 2:
            batches.append((k, decodes))

    validate.replay(run, validate.measured_requests(run)[0], record)
    return batches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--per-run", type=int, default=30)
    ap.add_argument("--real-ids", action="store_true", help="also the pool's own page ids")
    ap.add_argument("--runs", nargs="+", choices=sorted(SERVED), default=list(SERVED))
    args = ap.parse_args()
    out = {}
    for name in args.runs:
        shard = SERVED[name]
        batches = decode_batches(RUNS / name)
        rng = np.random.default_rng(0)
        pick = sorted(rng.choice(len(batches), min(args.per_run, len(batches)), replace=False))
        page_size = validate.load_engine_run(RUNS / name).cfg.cache.page_size
        steps = [
            {"step": batches[i][0], **step_layout(batches[i][1], page_size, args.real_ids)}
            for i in pick
        ]
        out[name] = {"shard": shard, "decode_only_steps": len(batches), "steps": steps}
        print(f"{name}: {len(batches)} decode-only steps, {len(steps)} kept")
    Path(args.out).write_text(json.dumps(out, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
