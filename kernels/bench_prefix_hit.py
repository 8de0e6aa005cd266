"""Where the prefix-hit fidelity composition is under-priced: its attention parts timed apart.

The worst prefix-hit step of the session-3 fidelity check (all presets under-predicted 11-20%) is
17 ragged decodes (175,735 tokens, longest 30,584) plus chunks of 25 and 271 new tokens over
1,104 and 17,306 cached ones. The simulator prices decode attention from the uniform-batch table
at the mean context, and the chunks one by one from prefill_attn; the step runs the ragged batch
in one decode launch and both chunks in one prefill launch. Timed per layer on each attention
shard: the ragged decode vs the uniform batch at its mean, both chunks in one launch vs each
alone.

    python -m kernels.bench_prefix_hit --out FILE.json
"""

from __future__ import annotations

import argparse
import json
from typing import Any

DECODE_CTX = [1453, 9708, 16283, 30584, 10813, 964, 15532, 1313, 2069, 10827, 167, 1715, 23781,
              1716, 21670, 22944, 4196]  # fmt: skip
CHUNKS = [(25, 1104), (271, 17306)]  # (new tokens, cached tokens)
SHARDS = {"32q/8kv": (32, 8), "32q/4kv": (32, 4)}


def decode_ms(lens: list[int], hq: int, hkv: int) -> float:
    import torch

    from kernels.bench import bench_ms
    from kernels.paged_decode import paged_decode_attention
    from kernels.reference import make_paged_kv

    g = torch.Generator(device="cuda").manual_seed(0)
    kv = make_paged_kv(lens, hkv, 128, 16, torch.bfloat16, "cuda", g)
    q = torch.randn(len(lens), hq, 128, generator=g, device="cuda").to(torch.bfloat16)
    out = torch.empty_like(q)
    kw: dict[str, Any] = dict(
        out=out, max_seq_len=max(lens), total_tokens=sum(lens), check_bounds=False
    )
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    return bench_ms(lambda: paged_decode_attention(*args, **kw))


def prefill_ms(chunks: list[tuple[int, int]], hq: int, hkv: int) -> tuple[float, str]:
    import torch

    from kernels.bench import bench_ms
    from kernels.paged_prefill import paged_prefill_attention, plan_prefill
    from kernels.reference import make_prefill_batch

    g = torch.Generator(device="cuda").manual_seed(0)
    new, ctx = [n for n, _ in chunks], [c for _, c in chunks]
    q, kv, cu = make_prefill_batch(ctx, new, hkv, hq // hkv, 128, 16, torch.bfloat16, "cuda", g)
    lens = [n + c for n, c in chunks]
    plan = plan_prefill(new, lens, hkv, hq // hkv, device="cuda")
    out = torch.empty_like(q)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu)
    kw: dict[str, Any] = dict(out=out, plan=plan, check_bounds=False)
    return bench_ms(lambda: paged_prefill_attention(*args, **kw)), plan.work_class


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from kernels.bench import environment

    mean = round(sum(DECODE_CTX) / len(DECODE_CTX))
    rows: dict[str, Any] = {}
    for name, (hq, hkv) in SHARDS.items():
        r: dict[str, Any] = {
            "decode_ragged_ms": decode_ms(DECODE_CTX, hq, hkv),
            "decode_uniform_mean_ms": decode_ms([mean] * len(DECODE_CTX), hq, hkv),
        }
        both, cls = prefill_ms(CHUNKS, hq, hkv)
        r["prefill_both_ms"], r["prefill_both_class"] = both, cls
        alone = [prefill_ms([c], hq, hkv) for c in CHUNKS]
        r["prefill_alone_ms"] = [a for a, _ in alone]
        r["prefill_alone_class"] = [c for _, c in alone]
        rows[name] = r
        print(
            f"{name}: decode ragged {r['decode_ragged_ms']:.4f} ms vs uniform mean "
            f"{r['decode_uniform_mean_ms']:.4f}; prefill both {both:.4f} ({cls}) vs alone "
            f"{' + '.join(f'{a:.4f}' for a in r['prefill_alone_ms'])}",
            flush=True,
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**environment(), "decode_ctx": DECODE_CTX, "chunks": CHUNKS, **rows}, f,
                      indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
