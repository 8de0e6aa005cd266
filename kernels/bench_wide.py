"""Wide (256-row) prefill tiles vs the 128-row "tiles" class, on the shards the calibration prices.

For each attention shard (32 q / 4 KV heads: the 70B presets at TP 2; 32 / 8: llama-3-8b) and
each chunk shape where the planner picks "tiles_wide", times the chunk twice with one plan each:
the planner's own (wide) and the same chunk with the wide class off (launch={"block_m": 128}:
the 128-row "tiles" config). Outputs are checked against the float32 reference first. Verdict:
`keep` if the wide tiles are faster in geometric mean and no shape is more than 2% slower, else
`off` (and `kernels.calibrate` is then not re-run: the prefill kernel stays as it was).

    python -m kernels.bench_wide --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from kernels.bench import bench_ms, environment
from kernels.bench_prefill import check_prefill, prefill_inputs

SHARDS = {
    "32q/4kv": {"num_q_heads": 32, "num_kv_heads": 4, "head_dim": 128},
    "32q/8kv": {"num_q_heads": 32, "num_kv_heads": 8, "head_dim": 128},
}
# (context, new tokens): the calibration grid's chunk sizes >= 1K and the issue-13 targets.
CASES = (
    (0, 1024),
    (0, 2048),
    (0, 4096),
    (0, 8192),
    (512, 2048),
    (2048, 1024),
    (8192, 2048),
    (8192, 8192),
    (32768, 2048),
)
MAX_SLOWER = 1.02


def time_case(ctx: int, new: int, shape: dict, wide: bool) -> tuple[float, float, str]:
    import torch

    from kernels.paged_prefill import paged_prefill_attention, plan_prefill

    q, kv, cu = prefill_inputs(ctx, new, shape=shape)
    hq, hkv = q.shape[1], kv.k_cache.shape[1]
    launch = None if wide else {"block_m": 128}
    plan = plan_prefill([new], [ctx + new], hkv, hq // hkv, device=q.device, launch=launch)
    out = torch.full_like(q, float("nan"))
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu)
    paged_prefill_attention(*args, out=out, plan=plan, check_bounds=True)
    err = check_prefill(q, kv, cu, out)
    if not (err < 1e-2) or not bool(torch.isfinite(out).all()):
        raise RuntimeError(f"wrong output: rel err {err} c={ctx} n={new} wide={wide}")
    ms = bench_ms(lambda: paged_prefill_attention(*args, out=out, plan=plan, check_bounds=False))
    return ms, err, plan.work_class


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from kernels.paged_prefill import PREFILL_LAUNCH_CONFIGS

    rows: list[dict[str, Any]] = []
    for name, shape in SHARDS.items():
        for ctx, new in CASES:
            wide_ms, wide_err, cls = time_case(ctx, new, shape, True)
            if cls != "tiles_wide":
                print(f"{name} c={ctx} n={new}: planner picks {cls}, skipped", flush=True)
                continue
            base_ms, base_err, base_cls = time_case(ctx, new, shape, False)
            row = {
                "shard": name,
                "ctx": ctx,
                "new": new,
                "wide_ms": wide_ms,
                "tiles_ms": base_ms,
                "ratio": wide_ms / base_ms,
                "wide_rel_err": wide_err,
                "tiles_rel_err": base_err,
                "tiles_class": base_cls,
            }
            rows.append(row)
            print(
                f"{name} c={ctx:>5} n={new:>5}: wide {wide_ms:.4f} ms, tiles {base_ms:.4f} ms, "
                f"ratio {row['ratio']:.3f}",
                flush=True,
            )
    ratios = [r["ratio"] for r in rows]
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
    keep = bool(ratios) and geo < 1.0 and max(ratios) <= MAX_SLOWER
    verdict = "keep" if keep else "off"
    print(f"wide tiles: geo-mean ratio {geo:.3f}, worst {max(ratios, default=float('nan')):.3f}")
    print(f"VERDICT {verdict}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    **environment(),
                    "tiles_wide": PREFILL_LAUNCH_CONFIGS["tiles_wide"],
                    "tiles": PREFILL_LAUNCH_CONFIGS["tiles"],
                    "geo_mean_ratio": geo,
                    "verdict": verdict,
                    "rows": rows,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
