"""Prefill key splits over several waves vs the one-wave rule, on chunks where the two differ.

`plan_prefill` used to take the shortest key split that kept every program in ONE wave; for a few
hundred new tokens over a long context that often meant no split at all (72 tiles x 17K keys on
132 SMs: 2 splits each would be 144 programs), a wave of long programs with SMs idle. It now
weighs several waves of shorter splits (`_split_length`). Each case is timed with the one-wave
rule (MAX_SPLIT_WAVES = 1) and with the default, outputs checked against the float32 reference;
controls are shapes where the two rules agree. Includes the prefix-hit fidelity step's two
chunks (25 over 1,104 and 271 over 17,306) in one launch.

    python -m kernels.bench_splits --out FILE.json
"""

from __future__ import annotations

import argparse
import json
from typing import Any

# (KV heads of a 32-query-head shard, [(new, cached), ...])
CASES = (
    (8, [(271, 17306)]),
    (8, [(25, 1104), (271, 17306)]),
    (8, [(200, 30000)]),
    (8, [(300, 4000)]),
    (8, [(400, 9000)]),
    (4, [(271, 1104)]),
    (4, [(200, 17306)]),
    (4, [(100, 30000)]),
    (4, [(400, 30000)]),
    (4, [(25, 1104), (271, 17306)]),
    # controls (the same plan either way)
    (8, [(256, 16384)]),
    (8, [(16, 32768)]),
    (8, [(200, 2048)]),
    (4, [(64, 32768)]),
)


def time_case(chunks: list[tuple[int, int]], hkv: int, waves: int) -> dict[str, Any]:
    import torch

    import kernels.paged_prefill as pp
    from kernels.bench import bench_ms
    from kernels.reference import make_prefill_batch, paged_prefill_reference

    g = torch.Generator(device="cuda").manual_seed(0)
    new, ctx = [n for n, _ in chunks], [c for _, c in chunks]
    q, kv, cu = make_prefill_batch(ctx, new, hkv, 32 // hkv, 128, 16, torch.bfloat16, "cuda", g)
    saved = pp.MAX_SPLIT_WAVES
    pp.MAX_SPLIT_WAVES = waves
    try:
        plan = pp.plan_prefill(new, [n + c for n, c in chunks], hkv, 32 // hkv, device="cuda")
    finally:
        pp.MAX_SPLIT_WAVES = saved
    out = torch.full_like(q, float("nan"))
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu)
    pp.paged_prefill_attention(*args, out=out, plan=plan, check_bounds=True)
    ref, _ = paged_prefill_reference(*args)
    err = float((out.float() - ref).norm() / ref.norm())
    if not (err < 1e-2) or not bool(torch.isfinite(out).all()):
        raise RuntimeError(f"wrong output: rel err {err} chunks {chunks} waves {waves}")
    ms = bench_ms(lambda: pp.paged_prefill_attention(*args, out=out, plan=plan, check_bounds=False))
    return {
        "ms": ms,
        "rel_err": err,
        "programs": int(plan.work.shape[0]) * hkv,
        "tokens_per_split": plan.tokens_per_split,
        "work_class": plan.work_class,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from kernels.bench import environment

    rows = []
    for hkv, chunks in CASES:
        one, multi = time_case(chunks, hkv, 1), time_case(chunks, hkv, 8)
        row = {"kv_heads": hkv, "chunks": chunks, "one_wave": one, "multi_wave": multi}
        row["ratio"] = multi["ms"] / one["ms"]
        rows.append(row)
        print(
            f"32q/{hkv}kv {chunks}: one wave {one['ms']:.4f} ms ({one['programs']} programs), "
            f"multi {multi['ms']:.4f} ms ({multi['programs']}), ratio {row['ratio']:.3f}",
            flush=True,
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**environment(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
