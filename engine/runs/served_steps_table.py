"""Where the decode-only steps' device time goes, per run: the served steps timed alone on the
H200 against their price and against the engine's own GPU clock in the run.

    python engine/runs/served_steps_table.py [LOG_DIR]

LOG_DIR (default logs/2026-11-30_served_batches_r7/) holds `engine.check --only
decode_step_served` (whole graphed decode steps, all layers) and `--only decode_served` (one
layer's decode attention) on `layouts_round7_ids.json` (served_layouts.py: 30 decode-only steps
of each round-7 run), each step three ways: its own block tables on the pool's own page ids
(`served_ids`), the same lengths on distinct pages (`distinct`) and equal lengths at their mean
(`equal`). Per run, medians over its steps of:
- in run / alone: the engine's GPU time for the step in the run over the same step alone;
- L2 measured / model: the step alone on its own pages over distinct pages, and what the shared
  page term (gpu.shared_page_reads: l2) says;
- attention alone / table: one layer on distinct pages over the decode table's price (ragged
  term on);
- rest alone / priced: the whole step less 32 such layers over the GEMM and LM-head prices;
- whole alone / priced: the distinct-pages step over its whole price.
Prices are the calibration's, device time scale 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from engine.check import served_rows
from engine.runs.fit_shared_reads import reread_tokens
from kvsched.validate import load_engine_run
from sim.latency.base import StepPlan
from sim.latency.factory import make_latency_model

RUNS = Path(__file__).resolve().parent
LOGS = RUNS / "logs" / "2026-11-30_served_batches_r7"
LAYOUTS = RUNS / "logs" / "2026-11-30_served_batches" / "layouts_round7_ids.json"
NONE = np.zeros(0, dtype=np.int64)


def _models(run: str):
    """The run's latency models, kernels only (device time scale 1, no overhead terms), with
    the ragged term on, without and with the shared page term; its layer count."""
    cfg = load_engine_run(RUNS / run).cfg
    models = []
    for l2 in ("hbm", "l2"):
        terms = {"ragged_decode": "measured", "shared_page_reads": l2, "device_time_scale": 1.0}
        models.append(make_latency_model(cfg.model, cfg.gpu.model_copy(update=terms), 1))
    return models, cfg.model.num_layers


def _rows(run: str, layouts: list[dict], steps: list[dict], layers: list[dict]) -> pd.DataFrame:
    (hbm, l2), num_layers = _models(run)
    gpu_s = load_engine_run(RUNS / run).steps.gpu_s.to_numpy()
    rows = []
    for layout, step, layer in zip(layouts, steps, layers, strict=True):
        lens = np.asarray(layout["lens"], dtype=np.int64)
        shared = reread_tokens(served_rows(layout))
        plan = StepPlan(NONE, NONE, lens, shared, int(lens.max()))
        parts = hbm.breakdown(plan)
        priced = sum(parts.values()) * 1e3
        rest = step["distinct_ms"] - num_layers * layer["distinct_ms"]
        rows.append({
            "decodes": len(lens),
            "mean context": lens.mean(),
            "in run / alone": gpu_s[layout["step"]] * 1e3 / step["served_ids_ms"],
            "L2 measured": step["served_ids_ms"] / step["distinct_ms"],
            "L2 model": l2.step_time_s(plan) * 1e3 / priced,
            "attention alone / table": layer["distinct_ms"] * num_layers
            / (parts["decode_attn_s"] * 1e3),
            "rest alone / priced": rest / ((parts["gemm_s"] + parts["lm_head_s"]) * 1e3),
            "whole alone / priced": step["distinct_ms"] / priced,
        })  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    logs = Path(sys.argv[1]) if len(sys.argv) > 1 else LOGS
    layouts = json.loads(LAYOUTS.read_text())
    whole = json.loads((logs / "decode_step_served_r7.json").read_text())
    layer = json.loads((logs / "decode_served_r7.json").read_text())
    table = {
        run: _rows(run, layouts[run]["steps"], whole[run], layer[run]).median()
        for run in layouts
        if run in whole
    }
    pd.set_option("display.width", 200)
    print(pd.DataFrame(table).T.round(3).to_string())


if __name__ == "__main__":
    main()
