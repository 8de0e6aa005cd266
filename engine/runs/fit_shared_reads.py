"""Fit the price of decodes that read shared pages (sim/latency/shared_reads.py) to the H200 table.

    python engine/runs/fit_shared_reads.py [--table FILE] [--write]

The table comes from `python -m engine.check --only decode_shared_pages` (one layer of our paged
decode kernel, CUDA-graph replay with L2 flushed, per attention shard, prefix and batch: the
sequences spread over G groups that share their prefix pages, and the same lengths on distinct
pages). Each point is one (shard, prefix, batch, G < batch): its time over the distinct-pages
time of the same lengths. The model's ratio is the calibration's own decode table at the
effective context over the table at the real one, so one (rho, p) is fitted to both shards and
the residuals are printed per shard. --write stores the fit as the calibration file's
`decode_shared_reads` entry (the rest of the file is left as it is).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from engine.check import shared_layouts, sharing
from sim.latency.calibrated import _Grid2
from sim.latency.shared_reads import SharedPoint, fit_shared_reads

ROOT = Path(__file__).resolve().parents[2]
LOGS = "engine/runs/logs/2026-11-30_decode_shared_graph/"
# tails of 128-384 tokens (5 prefixes x 6 batches), 1-2K, 2-4K and 6-10K (3-4 prefixes x 4-5
# batches): the decode kernel of 13:30 UTC
TABLES = [
    LOGS + "decode_shared_pages_table.json",
    LOGS + "decode_shared_pages_tails_1024_2048.json",
    LOGS + "decode_shared_pages_long_tails.json",
    LOGS + "decode_shared_pages_tails_6144_10240.json",
    # the same short tails again on the session-5 decode kernel (fused split combine), 3 prefixes
    "engine/runs/logs/2026-11-30_run4/tables/decode_shared_pages_table.json",
]
CALIBRATION = "kernels/calibration/h200.json"
# engine/check.py SHARED_SHARDS: the shard's name -> the calibration table it is priced from
SHARDS = {"llama-3-8b": ("llama-3-8b", 1), "article-70b-tp2": ("article-70b", 2)}


def shard_points(measured: dict) -> list[SharedPoint]:
    """(batch, context sum, shared tokens, time / distinct-pages time) of one shard's tables.
    The layouts are regenerated (engine.check.shared_layouts, seeded) and must give the file's
    token counts and shares."""
    points = []
    for table in measured.values():
        prefix, tails = int(table["prefix"]), tuple(table.get("tails", (128, 384)))
        batches = list(dict.fromkeys(int(k[1:].split("_g")[0]) for k in table if k[0] == "b"))
        for batch, groups, lens, _, member in shared_layouts(
            prefix, int(table["pool_pages"]), batches, tails
        ):
            cell, share = table[f"b{batch}_g{groups}"], sharing(prefix, lens, member)
            assert cell["kv_tokens"] == share["kv_tokens"], (prefix, batch, groups)
            assert abs(cell["duplicate_share"] - share["duplicate_share"]) < 1e-12
            if groups == batch:
                continue  # the distinct-pages reference itself
            ratio = cell["ms"] / table[f"b{batch}_g{batch}"]["ms"]
            shared = round(share["duplicate_share"] * share["kv_tokens"])
            points.append((batch, share["kv_tokens"], shared, ratio))
    return points


def decode_price(calibration: dict, model: str, tp: int):
    """ms of one layer's decode attention by (batch, mean context), as the simulator reads it."""
    table = next(t for t in calibration["tables"] if t["model"] == model and t["tp"] == tp)
    d = table["decode_attn"]
    grid = _Grid2(d["batch"], d["context"], d["ms"])
    return lambda batch, ctx: grid(float(batch), float(ctx))


def _load(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", nargs="+", default=TABLES)
    ap.add_argument("--calibration", default=CALIBRATION)
    ap.add_argument("--write", action="store_true", help="store the fit in the calibration file")
    args = ap.parse_args()
    cal_path = ROOT / args.calibration
    calibration = json.loads(cal_path.read_text())
    tables = [
        (
            [pt for path in args.table for pt in shard_points(_load(path)[shard])],
            decode_price(calibration, *SHARDS[shard]),
        )
        for shard in SHARDS
    ]
    model, errors = fit_shared_reads(tables)
    print(f"rho {model.rho:.2f} p {model.p:g} ({sum(len(t[0]) for t in tables)} points)")
    fit = {}
    for shard, err in zip(SHARDS, errors, strict=True):
        e = np.abs(err)
        fit[shard] = {
            "points": int(e.size),
            "median_abs_err": round(float(np.median(e)), 4),
            "mean_abs_err": round(float(e.mean()), 4),
            "max_abs_err": round(float(e.max()), 4),
        }
        print(f"  {shard}: {fit[shard]}")
    if args.write:
        calibration["decode_shared_reads"] = {
            "rho": model.rho,
            "p": model.p,
            "measured": args.table,
            "method": _load(args.table[0]).get("method", ""),
            "fit": fit,
        }
        cal_path.write_text(json.dumps(calibration, indent=1) + "\n")
        print(f"wrote decode_shared_reads to {args.calibration}")


if __name__ == "__main__":
    main()
