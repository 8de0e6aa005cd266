"""Host time of the steps with a prefill chunk, by quartile of the chunks' context: measured
(preparation + the scheduler's planning and applying + the rest off the GPU clock) against the
held-out host terms' price, with the planning and applying apart (steps.csv `plan_s`, `apply_s`,
since round 9).

    python engine/runs/host_by_context.py [RUN ...]

The price is `sim.latency.base.OverheadTerms.host_s` with the terms of the run's
`validation_heldout.json` (measured on the probes), less the device fit's fixed extra that
`gpu.prefill_step_overhead_s` carries with the host's (refitted here on the same probes).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd

import kvsched.validate as validate
from engine.runs import validations
from sim.latency.base import OverheadTerms

TERMS = {
    "overhead_s": "step_overhead_s",
    "per_decode_s": "decode_overhead_s",
    "prefill_extra_s": "prefill_step_overhead_s",
    "mixed_decode_s": "mixed_decode_overhead_s",
    "per_chunk_s": "chunk_overhead_s",
    "per_context_s": "context_overhead_s",
    "host_token_s": "host_token_overhead_s",
}


def device_extra_s(run_dir) -> float:
    """The device fit's fixed extra per chunk step, on the run's probes (default pricing)."""
    probes = [validate.load_engine_run(p) for p in validations.probes_for(run_dir)]
    return validate.chunk_device_terms(validate.probe_samples(probes))[1]


def table(run_dir) -> pd.DataFrame:
    held_out = json.loads((run_dir / "validation_heldout.json").read_text())
    terms = OverheadTerms(**{field: held_out[name] for field, name in TERMS.items()})
    extra = device_extra_s(run_dir)
    steps = pd.read_csv(run_dir / "engine" / "steps.csv")
    chunk = steps[steps.num_prefill > 0].copy()
    chunk["host_ms"] = (chunk.duration_s - chunk.gpu_s + chunk.sched_s) * 1e3
    columns = ["num_decode", "num_prefill", "prefill_ctx_sum", "prefill_tokens"]
    chunk["priced_ms"] = [
        (terms.host_s(*(int(v) for v in row)) - extra) * 1e3
        for row in chunk[columns].itertuples(index=False)
    ]
    for part in ("plan_s", "apply_s"):
        chunk[part.replace("_s", "_ms")] = chunk[part] * 1e3 if part in chunk else np.nan
    quartile = pd.qcut(chunk.prefill_ctx_sum.rank(method="first"), 4, labels=[1, 2, 3, 4])
    return chunk.groupby(quartile, observed=True).agg(
        context=("prefill_ctx_sum", "median"),
        chunks=("num_prefill", "median"),
        steps=("host_ms", "size"),
        host_ms=("host_ms", "median"),
        priced_ms=("priced_ms", "median"),
        plan_ms=("plan_ms", "median"),
        apply_ms=("apply_ms", "median"),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", default=["seed_1node", "multi_turn", "shared_prefix"])
    args = ap.parse_args()
    pd.set_option("display.width", 200)
    for name in args.runs:
        print(f"{name} (context quartiles of its chunk steps)")
        print(table(validations.RUNS / name).round(3).to_string())


if __name__ == "__main__":
    main()
