"""Where the decode-only steps' device time goes, per run: the served steps timed alone on the
H200 against their price and against the engine's own GPU clock in the run.

    python engine/runs/served_steps_table.py [--round 7|8|10] [--calibration FILE]

A round's log directory (round 7: logs/2026-11-30_served_batches_r7/, round 8:
logs/2026-12-01_served_batches_r8/) holds `engine.check --only decode_step_served` (whole graphed
decode steps, all layers) and `--only decode_served` (one layer's decode attention) on the
round's layouts (served_layouts.py: 30 decode-only steps of each of its runs), each step three
ways: its own block tables on the pool's own page ids
(`served_ids`), the same lengths on distinct pages (`distinct`) and equal lengths at their mean
(`equal`); round 10 (logs/2026-12-01_served_batches_r10/) has the one layer only. Per run,
medians over its steps of:
- in run / alone: the engine's GPU time for the step in the run over the same step alone;
- L2 measured / model: the step alone on its own pages over distinct pages, and what the shared
  page term (gpu.shared_page_reads: l2) says;
- attention alone / table: one layer on distinct pages over the decode table's price (ragged
  term on);
- rest alone / priced: the whole step less 32 such layers over the GEMM and LM-head prices;
- whole alone / priced: the distinct-pages step over its whole price.
Prices are the calibration's, device time scale 1: `--calibration` the file the steps were timed
against (default: the committed one, 22e7dc9's since session 11, whose decode kernel round 10
served and the 2026-12-01 05:08 UTC timing ran; round 8's 01:40 UTC timing ran 9eef4fe's kernel,
priced by that commit's h200.json, and round 7's 2026-11-30 23:28 UTC timing 942db55's:
`git show 9eef4fe:kernels/calibration/h200.json > FILE`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from engine.check import served_rows
from engine.runs.fit_shared_reads import reread_tokens
from kvsched.validate import EngineRun, load_engine_run
from sim.latency.base import StepPlan
from sim.latency.factory import make_latency_model

RUNS = Path(__file__).resolve().parent
# round -> (its runs, the timings' directory, its layouts, the timings' file suffix)
ROUNDS = {
    7: (
        RUNS / "round7",
        RUNS / "logs" / "2026-11-30_served_batches_r7",
        RUNS / "logs" / "2026-11-30_served_batches" / "layouts_round7_ids.json",
        "r7",
    ),
    8: (
        RUNS / "round8",
        RUNS / "logs" / "2026-12-01_served_batches_r8",
        RUNS / "logs" / "2026-12-01_served_batches_r8" / "layouts_round8_ids.json",
        "r8",
    ),
    # one layer only (no whole steps): the 2026-12-01 05:08 UTC timing, 6b29cdb's decode kernel
    10: (
        RUNS / "round10",
        RUNS / "logs" / "2026-12-01_served_batches_r10",
        RUNS / "logs" / "2026-12-01_served_batches_r10" / "layouts_round10_ids.json",
        "r10",
    ),
}
NONE = np.zeros(0, dtype=np.int64)


def _models(run: EngineRun, calibration: Path | None):
    """The run's latency models, kernels only (device time scale 1, no overhead terms), with
    the ragged term on, without and with the shared page term; its layer count."""
    cfg = run.cfg
    # an absolute path: sim.latency.calibrated joins it to kernels/calibration/ as itself
    file = {"calibration": str(calibration.resolve())} if calibration else {}
    models = []
    for l2 in ("hbm", "l2"):
        terms = {"ragged_decode": "measured", "shared_page_reads": l2, "device_time_scale": 1.0}
        terms |= file
        models.append(make_latency_model(cfg.model, cfg.gpu.model_copy(update=terms), 1))
    return models, cfg.model.num_layers


def _rows(
    run_dir: Path,
    layouts: list[dict],
    steps: list[dict] | None,
    layers: list[dict],
    calibration: Path | None,
) -> pd.DataFrame:
    engine_run = load_engine_run(run_dir)
    (hbm, l2), num_layers = _models(engine_run, calibration)
    gpu_s = engine_run.steps.gpu_s.to_numpy()
    rows = []
    for i, (layout, layer) in enumerate(zip(layouts, layers, strict=True)):
        lens = np.asarray(layout["lens"], dtype=np.int64)
        shared = reread_tokens(served_rows(layout))
        plan = StepPlan(NONE, NONE, lens, shared, int(lens.max()))
        parts = hbm.breakdown(plan)
        attention = layer["distinct_ms"] * num_layers / (parts["decode_attn_s"] * 1e3)
        if steps is None:  # one layer timed, not the whole step
            rows.append({
                "decodes": len(lens),
                "mean context": lens.mean(),
                "L2 measured (one layer)": layer["served_ids_ms"] / layer["distinct_ms"],
                "attention alone / table": attention,
            })  # fmt: skip
            continue
        step = steps[i]
        priced = sum(parts.values()) * 1e3
        rest = step["distinct_ms"] - num_layers * layer["distinct_ms"]
        rows.append({
            "decodes": len(lens),
            "mean context": lens.mean(),
            "in run / alone": gpu_s[layout["step"]] * 1e3 / step["served_ids_ms"],
            "L2 measured": step["served_ids_ms"] / step["distinct_ms"],
            "L2 model": l2.step_time_s(plan) * 1e3 / priced,
            "attention alone / table": attention,
            "rest alone / priced": rest / ((parts["gemm_s"] + parts["lm_head_s"]) * 1e3),
            "whole alone / priced": step["distinct_ms"] / priced,
        })  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round", type=int, choices=sorted(ROUNDS), default=8)
    ap.add_argument("--calibration", type=Path)
    args = ap.parse_args()
    runs, logs, layouts_file, suffix = ROUNDS[args.round]
    layouts = json.loads(layouts_file.read_text())
    whole_file = logs / f"decode_step_served_{suffix}.json"
    whole = json.loads(whole_file.read_text()) if whole_file.is_file() else None
    layer = json.loads((logs / f"decode_served_{suffix}.json").read_text())
    table = {
        run: _rows(
            runs / run,
            layouts[run]["steps"],
            None if whole is None else whole[run],
            layer[run],
            args.calibration,
        ).median()
        for run in layouts
        if (run in whole if whole is not None else not run.startswith("article70b_tp2"))
    }  # the TP-2 shard's steps are priced at TP 1 here: whole steps only where timed
    pd.set_option("display.width", 200)
    print(pd.DataFrame(table).T.round(3).to_string())


if __name__ == "__main__":
    main()
