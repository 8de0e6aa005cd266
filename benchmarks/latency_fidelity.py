"""Fidelity of the calibrated latency model: held-out GPU measurements vs CalibratedLatency.

`kvsched calibrate --fidelity N` timed N random step compositions per (model, tp) on the GPU
(ragged decode batches, prefill chunks with and without cached context, mixes), each as one
composite layer with every part launched back to back, x layers, plus the LM head
(`--fidelity-extra N` adds prefix-hit chunks and cascade decode groups; a cascade composition
runs kernels.cascade_decode and is priced as sim.cascade prices it). This script
prices the same compositions with `sim.latency.calibrated.CalibratedLatency` from the tables in
`kernels/calibration/h200.json` and reports the relative error of the measured parts (the
all-reduce is a roofline term on both sides of nothing: it is left out of the comparison).

    python -m benchmarks.latency_fidelity [--calibration FILE] [--fidelity FILE] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from sim.cascade import prefix_pass
from sim.config import GpuConfig, ModelConfig
from sim.latency import StepPlan
from sim.latency.calibrated import CalibratedLatency, find_table, load_calibration
from sim.presets import GPU_PRESETS, MODEL_PRESETS

CALIBRATION_DIR = Path(__file__).resolve().parent.parent / "kernels" / "calibration"


def evaluate(calibration: dict, fidelity: dict, gpu_name: str = "h200") -> dict[str, dict]:
    """Per (model, tp): every composition's measured and predicted seconds and the error stats."""
    gpu = GpuConfig(name=gpu_name, **GPU_PRESETS[gpu_name])
    results = {}
    for key, records in fidelity["runs"].items():
        name, tp_text = key.split(":tp")
        tp = int(tp_text)
        model = ModelConfig(name=name, **MODEL_PRESETS[name])
        table = find_table(calibration, model, tp)
        if table is None:
            continue
        lat = CalibratedLatency(model, gpu, tp, table)
        rows = []
        for rec in records:
            dec = np.asarray(rec["decode_ctx"], dtype=np.int64)
            groups = rec.get("cascade_groups") or []
            # A cascade step is priced as sim.cascade.CascadeExecutor prices it: the decodes'
            # contexts shrink to their tails, plus one shared-prefix pass for all groups.
            shared = np.repeat([p for _, p in groups], [s for s, _ in groups]).astype(np.int64)
            dec = dec - np.pad(shared, (0, dec.size - shared.size))
            plan = StepPlan(
                prefill_new=np.asarray(rec["prefill_new"], dtype=np.int64),
                prefill_ctx=np.asarray(rec["prefill_ctx"], dtype=np.int64),
                decode_ctx=dec,
            )
            pred = lat.measured_part_s(plan)
            if groups:
                size, pairs = prefix_pass([(s, p) for s, p in groups])
                pred += lat.cascade_prefix_s(size, round(pairs / size))
            rows.append(
                {
                    "kind": rec.get("kind", "base"),
                    "cascade_groups": groups,
                    "decodes": len(rec["decode_ctx"]),
                    "decode_tokens": int(sum(rec["decode_ctx"])),
                    "chunks": len(rec["prefill_new"]),
                    "prefill_tokens": int(sum(rec["prefill_new"])),
                    "measured_s": rec["measured_s"],
                    "predicted_s": pred,
                    "rel_err": (pred - rec["measured_s"]) / rec["measured_s"],
                }
            )
        errs = np.abs([r["rel_err"] for r in rows])
        by_kind = {}
        for kind in sorted({r["kind"] for r in rows}):
            e = np.abs([r["rel_err"] for r in rows if r["kind"] == kind])
            by_kind[kind] = {
                "n": int(e.size),
                "median_abs_rel_err": float(np.median(e)),
                "max_abs_rel_err": float(np.max(e)),
            }
        results[key] = {
            "n": len(rows),
            "median_abs_rel_err": float(np.median(errs)),
            "max_abs_rel_err": float(np.max(errs)),
            "by_kind": by_kind,
            "rows": rows,
        }
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path, default=CALIBRATION_DIR / "h200.json")
    ap.add_argument("--fidelity", type=Path, default=CALIBRATION_DIR / "h200_fidelity.json")
    ap.add_argument("--json", type=Path, default=None, help="write the per-composition rows")
    ap.add_argument("--verbose", action="store_true", help="print every composition")
    args = ap.parse_args(argv)
    results = evaluate(load_calibration(args.calibration), json.loads(args.fidelity.read_text()))
    print(f"{'model:tp':<20}{'n':>4}{'median |err|':>14}{'max |err|':>11}")
    for key, res in results.items():
        print(
            f"{key:<20}{res['n']:>4}{res['median_abs_rel_err']:>14.1%}"
            f"{res['max_abs_rel_err']:>11.1%}"
        )
        if len(res["by_kind"]) > 1:
            for kind, k in res["by_kind"].items():
                print(
                    f"  {kind:<18}{k['n']:>4}{k['median_abs_rel_err']:>14.1%}"
                    f"{k['max_abs_rel_err']:>11.1%}"
                )
        if args.verbose:
            for r in res["rows"]:
                groups = f" groups {r['cascade_groups']}" if r["cascade_groups"] else ""
                print(
                    f"   {r['kind']:<10} dec {r['decodes']:>3} ({r['decode_tokens']:>8} tok)"
                    f"{groups} chunks {r['chunks']} "
                    f"({r['prefill_tokens']:>5} tok): measured {r['measured_s'] * 1e3:8.2f} ms "
                    f"predicted {r['predicted_s'] * 1e3:8.2f} ms  {r['rel_err']:+.1%}"
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
