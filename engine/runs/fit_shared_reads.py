"""Fit the decode batch terms to the H200 tables: shared page reads (sim/latency/shared_reads.py)
and ragged batches (sim/latency/ragged.py).

    python engine/runs/fit_shared_reads.py [--table FILE ...] [--ragged FILE] [--write]

The table comes from `python -m engine.check --only decode_shared_pages` (one layer of our paged
decode kernel, CUDA-graph replay with L2 flushed, per attention shard, prefix and batch: the
sequences spread over G groups that share their prefix pages, and the same lengths on distinct
pages). Each point is one (shard, prefix, batch, G < batch): its time over the distinct-pages
time of the same lengths. The model's ratio is the calibration's own decode table at the
effective context over the table at the real one, so one (rho, p) is fitted to both shards and
the residuals are printed per shard. The ragged table (`--only decode_ragged`: batches of
lognormal lengths against equal ones) gives (mean, longest, time / equal-length time) points, one
(a, b, e) for both shards. --write stores the fits as the calibration file's
`decode_shared_reads` and `decode_ragged` entries (the rest of the file is left as it is).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from engine.check import SHARED_SHARDS as SHARDS
from engine.check import served_rows, shared_layouts, sharing
from sim.cascade import shared_reads
from sim.latency.calibrated import _Grid2
from sim.latency.ragged import RaggedDecode, RaggedPoint, fit_ragged_decode
from sim.latency.shared_reads import SharedPoint, SharedReads, fit_shared_reads

ROOT = Path(__file__).resolve().parents[2]
# The decode kernel the engine runs (session 9: the wave_fit split rule), re-measured on 2026-12-01
# 01:43-01:45 UTC: tails of 128-384 tokens (5 prefixes x 4-6 batches), 1-2K, 2-4K and 6-10K
# (3-4 prefixes x 3-5 batches). The earlier kernels' tables: logs/2026-11-30_decode_shared_graph/
# (13:30 UTC) and logs/2026-11-30_run4/tables/decode_shared_pages_table.json (session 5).
LOGS = "engine/runs/logs/2026-12-01_served_batches_r8/"
TABLES = [
    LOGS + "decode_shared_pages_table.json",
    LOGS + "decode_shared_pages_tails_1024_2048.json",
    LOGS + "decode_shared_pages_long_tails.json",
    LOGS + "decode_shared_pages_tails_6144_10240.json",
]
# The decode kernel the engine runs (session 9: the wave_fit split rule, faster on uniform
# batches, so the ragged ones' ratio to the equal-length table grew): means of 2K and 8K tokens,
# 8-64 decodes, and means of 512 and 1,024 tokens, 2-32 decodes (Azure's batches). The session-5/6
# kernel's tables: logs/2026-11-30_run4/tables/decode_ragged.json,
# logs/2026-11-30_run5/tables/decode_ragged_short.json.
RAGGED = [
    "engine/runs/logs/2026-12-01_ragged_s9/decode_ragged.json",
    "engine/runs/logs/2026-12-01_ragged_s9/decode_ragged_short.json",
]
# Held out: decode batches engine runs served (engine/runs/served_layouts.py), one layer each
SERVED = "engine/runs/logs/2026-11-30_served_batches/"
# (layouts, one-layer times): round 4's batches, round 5's with the pool's own page ids (earlier
# kernels), round 8's (the wave_fit kernel, timed 2026-12-01 01:40 UTC)
SERVED_TABLES = [
    (SERVED + "layouts.json", SERVED + "decode_served.json"),
    (SERVED + "layouts_round5_ids.json", SERVED + "decode_served_ids.json"),
    (LOGS + "layouts_round8_ids.json", LOGS + "decode_served_r8.json"),
]
# Fitted on too: the probes' served batches (real block tables of the calibration runs, timed
# alone with the kernel the engine runs), not the workloads' (held out). The synthetic tables
# spread each group over random batch positions and share 0.1-0.5 of the reads; served
# batches share 0.2-0.3 and save more at the same share (round 8: 0.85-0.87 measured vs 0.88-0.91
# modelled from the synthetic tables alone).
PROBE_SERVED = (
    LOGS + "layouts_round8_ids.json",
    LOGS + "decode_served_r8.json",
    ("host_probe", "overhead_probe"),
)
CALIBRATION = "kernels/calibration/h200.json"


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


def served_points(layouts: dict, measured: dict, runs) -> dict[str, list[SharedPoint]]:
    """Per attention shard, (batch, context sum, shared tokens, served / distinct-pages time)
    of the served batches of `runs` whose decodes share pages."""
    points: dict[str, list[SharedPoint]] = {shard: [] for shard in SHARDS}
    for run in runs:
        for step, cell in zip(layouts[run]["steps"], measured[run], strict=True):
            shared = reread_tokens(served_rows(step))
            if shared:
                lens = step["lens"]
                ratio = cell["served_ms"] / cell["distinct_ms"]
                points[layouts[run]["shard"]].append((len(lens), int(sum(lens)), shared, ratio))
    return points


def ragged_points(measured: dict) -> list[RaggedPoint]:
    """(mean context, longest, time / equal-length time) of one shard's ragged table."""
    points = []
    for key, cell in measured.items():
        if not key.startswith("b") or key.endswith("_s0.0"):
            continue
        batch = int(key[1:].split("_")[0])
        equal = measured[key.rsplit("_s", 1)[0] + "_s0.0"]
        if abs(cell["kv_tokens"] / equal["kv_tokens"] - 1) > 0.01:
            continue  # lengths clipped at 64K: not the same tokens as its equal batch
        mean = cell["kv_tokens"] / batch
        points.append((mean, int(cell["max_len"]), cell["ms"] / equal["ms"]))
    return points


def reread_tokens(rows: list[list[int]], page_size: int = 16) -> int:
    """Tokens a step's decodes (block tables `rows`) read that another decode of it reads too:
    sim.cascade.shared_reads itself, on the tables as the replay's decodes."""
    decodes: list = [(SimpleNamespace(pages=row), 1, False) for row in rows]  # what it reads
    return shared_reads(decodes, page_size)


def served_check(
    layouts: dict, measured: dict, calibration: dict, shared: SharedReads, ragged: RaggedDecode
) -> dict:
    """Per served run, the median over its batches of the measured time ratios (served /
    distinct pages, distinct pages / equal lengths) and of the models' (shared reads: the table
    at the effective context over the table at the real one; ragged: the factor)."""
    out = {}
    for name, layout in layouts.items():
        price = decode_price(calibration, *SHARDS[layout["shard"]])
        rows = []
        for step, cell in zip(layout["steps"], measured[name], strict=True):
            lens = np.array(step["lens"])
            b, total = len(lens), int(lens.sum())
            effective = shared.effective_tokens(total, reread_tokens(served_rows(step)))
            rows.append((
                cell["served_ms"] / cell["distinct_ms"],
                price(b, effective / b) / price(b, total / b),
                cell["distinct_ms"] / cell["equal_ms"],
                ragged.factor(total / b, int(lens.max())),
            ))  # fmt: skip
        med = np.median(np.array(rows), axis=0)
        out[name] = dict(
            zip(("shared", "shared_model", "ragged", "ragged_model"), med.round(3), strict=True)
        )
    return out


def _summary(errors: np.ndarray) -> dict:
    e = np.abs(errors)
    return {
        "points": int(e.size),
        "median_abs_err": round(float(np.median(e)), 4),
        "mean_abs_err": round(float(e.mean()), 4),
        "max_abs_err": round(float(e.max()), 4),
    }


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
    ap.add_argument("--ragged", nargs="+", default=RAGGED)
    ap.add_argument("--write", action="store_true", help="store the fits in the calibration file")
    args = ap.parse_args()
    cal_path = ROOT / args.calibration
    calibration = json.loads(cal_path.read_text())
    layouts, measured, runs = PROBE_SERVED
    served = served_points(_load(layouts), _load(measured), runs)
    tables = [
        (
            [pt for path in args.table for pt in shard_points(_load(path)[shard])] + served[shard],
            decode_price(calibration, *SHARDS[shard]),
        )
        for shard in SHARDS
    ]
    model, errors = fit_shared_reads(tables)
    print(f"rho {model.rho:.2f} p {model.p:g} ({sum(len(t[0]) for t in tables)} points)")
    fit = {shard: _summary(err) for shard, err in zip(SHARDS, errors, strict=True)}
    for shard, summary in fit.items():
        print(f"  {shard}: {summary}")
    ragged_tables = [_load(path) for path in args.ragged]
    ragged, ragged_errors = fit_ragged_decode(
        [pt for table in ragged_tables for shard in SHARDS for pt in ragged_points(table[shard])]
    )
    ragged_fit = _summary(ragged_errors)
    print(f"ragged: a {ragged.a:g} b {ragged.b:g} e {ragged.e:g}: {ragged_fit}")
    for layouts, measured in SERVED_TABLES:
        held_out = served_check(_load(layouts), _load(measured), calibration, model, ragged)
        print(f"served batches, {Path(measured).name} (medians: measured vs model):")
        for name, r in held_out.items():
            fitted = measured == PROBE_SERVED[1] and name in PROBE_SERVED[2]
            print(
                f"  {name}{' (fitted on)' if fitted else ' (held out)'}: shared pages "
                f"{r['shared']:.3f} vs {r['shared_model']:.3f}, "
                f"ragged {r['ragged']:.3f} vs {r['ragged_model']:.3f}"
            )
    if args.write:
        calibration["decode_shared_reads"] = {
            "rho": model.rho,
            "p": model.p,
            "measured": args.table,
            "served": {"layouts": layouts, "times": measured, "runs": list(runs)},
            "method": _load(args.table[0]).get("method", ""),
            "fit": fit,
        }
        calibration["decode_ragged"] = {
            "a": ragged.a,
            "b": ragged.b,
            "e": ragged.e,
            "ref_ctx": ragged.ref_ctx,
            "measured": args.ragged,
            "fit": ragged_fit,
        }
        cal_path.write_text(json.dumps(calibration, indent=1) + "\n")
        print(f"wrote decode_shared_reads and decode_ragged to {args.calibration}")


if __name__ == "__main__":
    main()
