"""Bench of the paged prefill and cascade decode kernels: `python -m kernels.bench_prefill`.

Same method as kernels.bench (CUDA-graph replay, events, median, L2 flushed before every replay),
article shape (64 query heads, 8 KV heads, head_dim 128, BF16, one layer, page 16, pages in
random order). Every measured output is first checked against the float32 reference.

prefill: one request, n new tokens over c cached ones (the chunk's K/V already in the pool).
    TFLOP/s use causal-correct FLOPs (kernels.reference.prefill_flops). The KV-read roofline is
    (c + n) tokens of K and V read once at the measured copy ceiling; the FLOP floor is the FLOPs
    at the measured bf16 matmul rate. Compared with contiguous SDPA (flash, cuDNN, efficient;
    KV expanded to the query heads, bottom-right causal mask) and, with --flex, FlexAttention
    (torch.compile, GQA, block mask).
cascade: the seed mix (100 requests: 90 x U[512, 8192] + 10 x 32K) where 80 requests (every
    one whose index is not 4 mod 5) share a 2,048-token prefix (those shorter than 2,049 tokens
    are lengthened to 2,049 so each keeps a token of its own). Compared with the plain decode
    kernel on the same tables (which reads the shared pages once per sequence) and on the same
    lengths without sharing; the shared-bytes bound is the unshared time x unique / total KV.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from kernels.bench import (
    ARTICLE_SHAPE,
    GRAPH_FALLBACKS,
    bench_ms,
    copy_ceiling_tbps,
    device,
    environment,
    seed_mix_lengths,
)

PREFILL_CONTEXTS = (0, 512, 8192, 32768)
PREFILL_CHUNKS = (16, 64, 2048, 8192)
SMALL_CHUNKS = (1, 16, 64)  # the "few new tokens over 32K" target rows
FLEX_CASES = ((0, 8192), (32768, 2048))
SHARED_PREFIX = 2048
PAGE = 16
DATASHEET_TBPS = 4.8  # H200 HBM3e
DATASHEET_TFLOPS = 990.0  # H200 SXM dense bf16


class WrongPrefillOutput(RuntimeError):
    """A timed launch whose output is not the reference's: it stops the bench, whatever else
    a suite tolerates (a variant that fails to compile is only logged)."""


def matmul_tflops() -> float:
    """bf16 8192^3 matmul rate (random data), the FLOP ceiling used for the floor column."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = bench_ms(lambda: a @ b, graph=False)
    return 2 * 8192**3 / (ms * 1e-3) / 1e12


def prefill_inputs(ctx: int, new: int, seed: int = 0, shape=ARTICLE_SHAPE):
    import torch

    from kernels.reference import make_prefill_batch

    g = torch.Generator(device=device()).manual_seed(seed)
    group = shape["num_q_heads"] // shape["num_kv_heads"]
    return make_prefill_batch(
        [ctx],
        [new],
        shape["num_kv_heads"],
        group,
        shape["head_dim"],
        PAGE,
        torch.bfloat16,
        device(),
        g,
    )


def check_prefill(q, kv, cu, out, max_rows: int = 128) -> float:
    """Rel err vs the float32 reference on the last `max_rows` queries (they see every key)."""
    from kernels.reference import paged_prefill_reference

    n = q.shape[0]
    lo = max(0, n - max_rows)
    L = int(kv.seq_lens[0])
    sub_cu = cu.new_tensor([0, n - lo])
    # The last n - lo queries form a chunk of n - lo over L keys: same bottom-right mask.
    ref, _ = paged_prefill_reference(
        q[lo:], kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens.new_tensor([L]), sub_cu
    )
    return float((out[lo:].float() - ref).norm() / ref.norm())


def time_prefill(
    ctx: int, new: int, cfg: dict, seed: int = 0, check: bool = True
) -> tuple[float, float, str]:
    """(graph ms, rel err or nan, work class) of our kernel on one chunk, with a prebuilt plan.

    `cfg` holds plan knobs (DEFAULT_PREFILL_CONFIG keys) and, optionally, launch knobs that
    override the plan's work-class config (PREFILL_LAUNCH_CONFIGS)."""
    import torch

    from kernels.paged_prefill import CLASS_KEYS, paged_prefill_attention, plan_prefill

    q, kv, cu = prefill_inputs(ctx, new, seed)
    hq, hkv = q.shape[1], kv.k_cache.shape[1]
    plan_keys = ("block_m", "programs_per_sm", "min_split_tokens")
    plan = plan_prefill(
        [new],
        [ctx + new],
        hkv,
        hq // hkv,
        device=q.device,
        launch={k: cfg[k] for k in CLASS_KEYS if k in cfg},
        **{k: cfg[k] for k in plan_keys if k in cfg and cfg[k] is not None},
    )
    out = torch.full_like(q, float("nan"))
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu)
    paged_prefill_attention(*args, out=out, plan=plan, check_bounds=True)
    err = check_prefill(q, kv, cu, out) if check else float("nan")
    if check and (not (err < 1e-2) or not bool(torch.isfinite(out).all())):
        raise WrongPrefillOutput(
            f"prefill output wrong: rel err {err} at c={ctx} n={new} cfg {cfg}"
        )
    ms = bench_ms(lambda: paged_prefill_attention(*args, out=out, plan=plan, check_bounds=False))
    return ms, err, plan.work_class


def sdpa_prefill_ms(ctx: int, new: int) -> dict[str, float]:
    """Contiguous SDPA per backend: q [1, Hq, n, D], KV expanded to Hq heads, bottom-right mask.
    (The efficient backend, 2x slower than flash on every case of run 1, is not timed.)"""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    hq, d = ARTICLE_SHAPE["num_q_heads"], ARTICLE_SHAPE["head_dim"]
    q = torch.randn((1, hq, new, d), device="cuda", dtype=torch.bfloat16)
    k = torch.randn((1, hq, ctx + new, d), device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    res = {}
    for backend in (
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.CUDNN_ATTENTION,
    ):

        def call(backend=backend):
            with sdpa_kernel([backend]):
                if ctx == 0:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return F.scaled_dot_product_attention(
                    q, k, v, attn_mask=causal_lower_right(new, ctx + new)
                )

        try:
            call()
            res[backend.name.lower()] = bench_ms(call)
        except RuntimeError:
            continue
    return res


def flex_prefill_ms(ctx: int, new: int) -> float | None:
    """FlexAttention (compiled, GQA) with a bottom-right causal block mask; None if it fails."""
    import torch

    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    hq, hkv, d = (ARTICLE_SHAPE[k] for k in ("num_q_heads", "num_kv_heads", "head_dim"))
    q = torch.randn((1, hq, new, d), device="cuda", dtype=torch.bfloat16)
    k = torch.randn((1, hkv, ctx + new, d), device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + ctx

    try:
        bm = create_block_mask(mask_mod, 1, 1, new, ctx + new, device="cuda")
        fn = torch.compile(flex_attention)
        fn(q, k, v, block_mask=bm, enable_gqa=True)
        return bench_ms(lambda: fn(q, k, v, block_mask=bm, enable_gqa=True))
    except Exception as exc:  # a torch without a working Flex path: no column, not a crash
        GRAPH_FALLBACKS.append(f"flex c={ctx} n={new}: {type(exc).__name__}: {str(exc)[:100]}")
        return None


def prefill_row(ctx, new, cfg, copy_tbps, mm_tflops, sdpa=True, flex=False) -> dict:
    from kernels.reference import prefill_flops

    hq, hkv, d = (ARTICLE_SHAPE[k] for k in ("num_q_heads", "num_kv_heads", "head_dim"))
    ms, err, work_class = time_prefill(ctx, new, cfg)
    flops = prefill_flops([ctx], [new], hq, d)
    kv_bytes = (ctx + new) * 2 * hkv * d * 2
    # Datasheet roofline: max(KV read once at 4.8 TB/s, FLOPs at 990 TFLOP/s dense bf16).
    roofline_ms = max(kv_bytes / DATASHEET_TBPS, flops / DATASHEET_TFLOPS) / 1e12 * 1e3
    row = {
        "context": ctx,
        "new": new,
        "ms": ms,
        "work_class": work_class,
        "roofline_ms": roofline_ms,
        "x_roofline": ms / roofline_ms,
        "roofline_bound": "kv" if kv_bytes / DATASHEET_TBPS > flops / DATASHEET_TFLOPS else "flops",
        "rel_err": err,
        "tflops": flops / (ms * 1e-3) / 1e12,
        "flops": flops,
        "kv_bytes": kv_bytes,
        "kv_roofline_ms": kv_bytes / (copy_tbps * 1e12) * 1e3,
        "flop_floor_ms": flops / (mm_tflops * 1e12) * 1e3,
    }
    row["x_kv_roofline"] = ms / row["kv_roofline_ms"]
    if sdpa:
        row["sdpa_ms"] = sdpa_prefill_ms(ctx, new)
        if row["sdpa_ms"]:
            best = min(row["sdpa_ms"].values())
            row["sdpa_best_tflops"] = flops / (best * 1e-3) / 1e12
    if flex:
        fms = flex_prefill_ms(ctx, new)
        row["flex_ms"] = fms
        row["flex_tflops"] = None if fms is None else flops / (fms * 1e-3) / 1e12
    _free()
    return row


# A small-suite variant's keys that go to plan_prefill (the rest go to prepare_prefill, except
# "_gluon": kernels.gluon_prefill module knobs set while the variant is prepared).
SMALL_PLAN_KEYS = ("block_m", "programs_per_sm", "min_split_tokens", "pad_min_rows")


def small_variant(args, plan_args: tuple, knobs: dict, out):
    """(plan, prepared launch) of one small-suite variant, its output checked."""
    import torch

    from kernels import gluon_prefill
    from kernels.paged_prefill import CLASS_KEYS, plan_prefill, prepare_prefill

    q, kv, cu = args
    plan_kw = {k: v for k, v in knobs.items() if k in SMALL_PLAN_KEYS}
    launch = {k: v for k, v in knobs.items() if k in CLASS_KEYS}
    rest = {k: v for k, v in knobs.items() if k not in (*SMALL_PLAN_KEYS, *CLASS_KEYS, "_gluon")}
    plan = plan_prefill(*plan_args, device=q.device, launch=launch or None, **plan_kw)
    saved = {k: getattr(gluon_prefill, k) for k in knobs.get("_gluon", {})}
    try:
        for k, v in knobs.get("_gluon", {}).items():
            setattr(gluon_prefill, k, v)  # read when the launch is prepared (its constants)
        tensors = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, cu)
        launch_ = prepare_prefill(*tensors, out=out, plan=plan, **rest)
    finally:
        for k, v in saved.items():
            setattr(gluon_prefill, k, v)
    launch_.launch(kv.k_cache, kv.v_cache)
    err = check_prefill(q, kv, cu, out)
    if not (err < 1e-2) or not bool(torch.isfinite(out).all()):
        raise WrongPrefillOutput(f"prefill output wrong: rel err {err} {knobs}")
    return plan, launch_


def small_chunk_rows(cases: list, variants: list[dict], log, shape=ARTICLE_SHAPE) -> list[dict]:
    """Few new tokens over a long context (the prefix-hit target), one prepared launch per
    variant (plan knobs SMALL_PLAN_KEYS and launch keys to plan_prefill, the combine's knobs to
    prepare_prefill, "_gluon" module knobs), timed as each layer of the engine's step issues it;
    two passes, the second in reverse order. A variant that fails to compile or run is logged
    and left out; one whose output is wrong stops the suite (WrongPrefillOutput)."""
    import torch

    from kernels.reference import prefill_flops

    hq, hkv, d = (shape[k] for k in ("num_q_heads", "num_kv_heads", "head_dim"))
    rows = []
    for ctx, new in cases:
        q, kv, cu = prefill_inputs(ctx, new, shape=shape)
        kv_bytes = (ctx + new) * 2 * hkv * d * 2
        flops = prefill_flops([ctx], [new], hq, d)
        roofline_ms = max(kv_bytes / DATASHEET_TBPS, flops / DATASHEET_TFLOPS) / 1e12 * 1e3
        plan_args = ([new], [ctx + new], hkv, hq // hkv)
        ready = {}
        for i, knobs in enumerate(variants):
            try:
                ready[i] = small_variant((q, kv, cu), plan_args, knobs, torch.full_like(q, np.nan))
            except WrongPrefillOutput:
                raise
            except Exception as exc:  # a variant that does not compile or run: the others go on
                log(f"  small c={ctx} n={new} {knobs}: FAILED {type(exc).__name__}: {exc}")

        def timed(i: int, ready=ready, kv=kv) -> float:
            return bench_ms(lambda: ready[i][1].launch(kv.k_cache, kv.v_cache))

        order = sorted(ready)
        first = {i: timed(i) for i in order}
        second = {i: timed(i) for i in reversed(order)}
        line = []
        for i in order:
            plan, launch = ready[i]
            ms = (first[i] + second[i]) / 2
            rows.append(
                {
                    "context": ctx,
                    "new": new,
                    "knobs": variants[i],
                    "ms": ms,
                    "ms_passes": [first[i], second[i]],
                    "x_roofline": ms / roofline_ms,
                    "roofline_ms": roofline_ms,
                    "work_class": plan.work_class,
                    "max_splits": plan.max_splits,
                    "block_m": plan.block_m,
                    "main_kernel": getattr(launch.launches[0].kernel, "__name__", "?"),
                    "launches": len(launch.launches),
                }
            )
            r = rows[-1]
            line.append(
                f"{ms:.4f} ({r['x_roofline']:.2f}x {plan.work_class}/{plan.block_m}/"
                f"{plan.max_splits})"
            )
        log(f"  small c={ctx} n={new}: " + " | ".join(line))
        del q, kv, ready
        _free()
    return rows


def load_json_arg(text: str):
    """A JSON string, or the path of a JSON file."""
    if text.lstrip()[:1] in ("{", "["):
        return json.loads(text)
    return json.loads(Path(text).read_text())


def _free() -> None:
    import torch

    torch.cuda.empty_cache()


def cascade_mix(seed: int = 0) -> tuple[list[int], list[int], list[int]]:
    """(lengths with the sharing requests first, group sizes, prefix lengths)."""
    lens = seed_mix_lengths(seed)
    share = [max(n, SHARED_PREFIX + 1) for i, n in enumerate(lens) if i % 5 != 4]
    alone = [n for i, n in enumerate(lens) if i % 5 == 4]
    return share + alone, [len(share)] + [1] * len(alone), [SHARED_PREFIX] + [0] * len(alone)


def cascade_rows(copy_tbps: float, prefix_cfg: dict, decode_cfg: dict, log) -> list[dict]:
    import torch

    from kernels.cascade_decode import cascade_decode_attention, plan_cascade
    from kernels.paged_decode import paged_decode_attention
    from kernels.reference import make_paged_kv, make_shared_prefix_kv, paged_decode_reference

    hq, hkv, d = (ARTICLE_SHAPE[k] for k in ("num_q_heads", "num_kv_heads", "head_dim"))
    lens, sizes, prefixes = cascade_mix()
    dev = device()
    g = torch.Generator(device=dev).manual_seed(0)
    kv = make_shared_prefix_kv(lens, sizes, prefixes, hkv, d, PAGE, torch.bfloat16, dev, g)
    q = torch.randn(len(lens), hq, d, generator=g, device=dev).to(torch.bfloat16)
    plan = plan_cascade(
        kv.block_tables,
        kv.seq_lens,
        sizes,
        prefixes,
        PAGE,
        hkv,
        hq // hkv,
        device=dev,
        prefix_config=prefix_cfg,
    )
    out = torch.full_like(q, float("nan"))

    def casc(check_bounds=False):
        cascade_decode_attention(
            q,
            kv.k_cache,
            kv.v_cache,
            plan,
            out=out,
            check_bounds=check_bounds,
            prefix_config=prefix_cfg,
            decode_config=decode_cfg,
        )

    casc(True)
    share = sizes[0]
    idx = sorted({0, share // 2, share - 1, min(share, len(lens) - 1), len(lens) - 1})
    ref = paged_decode_reference(
        q[idx], kv.k_cache, kv.v_cache, kv.block_tables[idx], kv.seq_lens[idx]
    )
    err = float((out[idx].float() - ref).norm() / ref.norm())
    if not (err < 1e-2) or not bool(torch.isfinite(out).all()):
        raise RuntimeError(f"cascade output wrong: rel err {err}")
    casc_ms = bench_ms(casc)
    hints = dict(max_seq_len=max(lens), total_tokens=sum(lens), check_bounds=False, **decode_cfg)
    out2 = torch.empty_like(q)
    plain_ms = bench_ms(
        lambda: paged_decode_attention(
            q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, out=out2, **hints
        )
    )
    # Prefix pass alone (what the calibration's cascade table prices per group).
    from kernels.paged_prefill import paged_prefill_attention

    o_p = torch.empty(q.shape, dtype=torch.float32, device=dev)
    lse_p = torch.empty(q.shape[:2], dtype=torch.float32, device=dev)
    pcfg = {k: v for k, v in prefix_cfg.items() if k in ("block_n", "num_warps", "num_stages")}
    prefix_ms = bench_ms(
        lambda: paged_prefill_attention(
            q,
            kv.k_cache,
            kv.v_cache,
            plan.prefix_tables,
            plan.prefix_lens,
            plan.group_starts,
            causal=False,
            out=o_p,
            lse_out=lse_p,
            plan=plan.prefix_plan,
            check_bounds=False,
            **pcfg,
        )
    )
    _free()
    g = torch.Generator(device=dev).manual_seed(1)
    kv2 = make_paged_kv(lens, hkv, d, PAGE, torch.bfloat16, dev, g)
    unshared_ms = bench_ms(
        lambda: paged_decode_attention(
            q, kv2.k_cache, kv2.v_cache, kv2.block_tables, kv2.seq_lens, out=out2, **hints
        )
    )
    _free()
    total, unique = sum(lens), plan.unique_tokens
    per_tok = 2 * hkv * d * 2
    bound_ms = unshared_ms * unique / total
    row = {
        "case": "seed-mix, 80 share 2048",
        "batch": len(lens),
        "total_tokens": total,
        "unique_tokens": unique,
        "kv_bytes_total": total * per_tok,
        "kv_bytes_unique": unique * per_tok,
        "cascade_ms": casc_ms,
        "prefix_pass_ms": prefix_ms,
        "plain_shared_tables_ms": plain_ms,
        "plain_unshared_ms": unshared_ms,
        "shared_bytes_bound_ms": bound_ms,
        "unique_bytes_at_copy_ms": unique * per_tok / (copy_tbps * 1e12) * 1e3,
        "speedup_vs_plain": plain_ms / casc_ms,
        "bound_speedup_vs_plain": plain_ms / bound_ms,
        "frac_of_bound": bound_ms / casc_ms,
        "rel_err": err,
        "prefix_config": prefix_cfg,
        "decode_config": decode_cfg,
    }
    log(
        f"  cascade {casc_ms:.4f} ms (prefix pass {prefix_ms:.4f}) | plain on shared tables "
        f"{plain_ms:.4f} | plain unshared {unshared_ms:.4f} | bound {bound_ms:.4f} | "
        f"x{row['speedup_vs_plain']:.3f} vs plain, {row['frac_of_bound']:.3f} of bound"
    )
    return [row]


# Per work class: the shapes it is tuned on and the candidates, most promising first (the
# budget cuts the tail). Launch keys only (PREFILL_LAUNCH_CONFIGS); the first is the default.
TUNE_SHAPES = {
    "split_small": [(32768, 1), (16384, 2)],
    "split": [(32768, 16), (32768, 64)],
    "tiles": [(0, 8192), (8192, 2048), (512, 2048)],
}
_B: dict = {"block_n": 128, "num_warps": 8, "num_stages": 3}
TUNE_CANDIDATES: dict[str, list[dict]] = {
    "tiles": [
        dict(_B),
        dict(_B, lazy_rescale=True),
        dict(_B, block_n=64, num_stages=2),  # ~96 KB of shared memory: 2 programs per SM
        dict(_B, num_stages=2),
        dict(_B, num_stages=2, lazy_rescale=True),
        dict(_B, block_n=64, num_stages=2, lazy_rescale=True),
        dict(_B, num_stages=4),
        dict(_B, block_n=64, num_stages=3),
        dict(_B, warp_specialize=True),
        dict(_B, warp_specialize=True, lazy_rescale=True),
    ],
    "split": [
        dict(_B),
        dict(_B, block_n=64, num_stages=2, split_programs_per_sm=2),
        dict(_B, lazy_rescale=True),
        dict(_B, block_n=64),
        dict(_B, num_warps=4, block_n=64, num_stages=2, split_programs_per_sm=2),
        dict(_B, num_stages=2),
        dict(_B, warp_specialize=True),
    ],
    "split_small": [
        dict(_B),
        dict(_B, num_warps=4),
        dict(_B, num_warps=4, block_n=64, num_stages=4),
        dict(_B, num_warps=4, block_n=64, num_stages=3, split_programs_per_sm=4),
        dict(_B, num_warps=4, split_programs_per_sm=1),
        dict(_B, num_warps=2, block_n=64, num_stages=4),
    ],
}


def tune_prefill(log, budget_s: float = 120.0, on_best=None) -> tuple[dict[str, dict], list[dict]]:
    """Per work class, the fastest candidate by geo-mean time over the class's shapes (each
    candidate checked against the reference once). Returns (class -> config, trials);
    `on_best(best so far)` is called after every improvement (a crash keeps what was found).
    Candidates that may not compile on every Triton (warp_specialize) come last in a class."""
    trials: list[dict] = []
    best_cfgs: dict[str, dict] = {}
    t0 = time.time()
    per_class = budget_s / len(TUNE_SHAPES)
    for ci, (cls, shapes) in enumerate(TUNE_SHAPES.items()):
        best_score = float("inf")
        class_end = t0 + per_class * (ci + 1)
        for i, cand in enumerate(TUNE_CANDIDATES[cls]):
            if i > 0 and time.time() > class_end:
                log(f"  tune {cls}: time budget spent after {i} candidates")
                break
            try:
                times = []
                for j, (c, n) in enumerate(shapes):
                    ms, _, got = time_prefill(c, n, cand, check=j == 0)
                    if got != cls:
                        raise RuntimeError(f"c={c} n={n} planned as {got}, not {cls}")
                    times.append(ms)
            except Exception as exc:  # a config that does not compile, run or check is skipped
                log(f"  tune {cls} {cand}: failed ({type(exc).__name__}: {str(exc)[:160]})")
                trials.append({"class": cls, **cand, "failed": f"{type(exc).__name__}"})
                _free()
                continue
            score = float(np.mean(np.log(times)))
            trials.append(
                {"class": cls, **cand, "ms": dict(zip(map(str, shapes), times, strict=True))}
            )
            log(f"  tune {cls} {cand}: " + " ".join(f"{t:.4f}" for t in times))
            if score < best_score:
                best_cfgs[cls], best_score = dict(cand), score
                if on_best is not None:
                    on_best(best_cfgs)
            _free()
    return best_cfgs, trials


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kernels.bench_prefill", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench_prefill.json"))
    ap.add_argument("--tune", action="store_true", help="sweep prefill configs first")
    ap.add_argument("--tune-budget", type=float, default=120.0)
    ap.add_argument(
        "--candidates",
        default="",
        help="JSON {class: [config, ...]}: sweep these instead (only these classes); plan knobs "
        "such as block_m may be given too",
    )
    ap.add_argument(
        "--tune-shapes",
        default="",
        help="JSON {class: [[context, new], ...]}: time the candidates on these shapes instead",
    )
    ap.add_argument(
        "--tune-only",
        action="store_true",
        help="sweep, write --launch-configs-out after every improvement and --out, then stop",
    )
    ap.add_argument("--flex", action="store_true", help="also time FlexAttention (compiles)")
    ap.add_argument("--no-sdpa", action="store_true")
    ap.add_argument("--cascade-sweep", action="store_true", help="prefix splits at 1 and 2 /SM")
    ap.add_argument("--suite", default="prefill,cascade", help="of prefill, cascade, small")
    ap.add_argument(
        "--small-cases",
        default="[[32768, 1], [32768, 16], [32768, 64]]",
        help="JSON [[context, new], ...] of the small suite",
    )
    ap.add_argument(
        "--small-variants",
        default="[{}]",
        help="JSON list of variants: plan knobs (SMALL_PLAN_KEYS), launch keys, prepare_prefill "
        'knobs (combine_rows, combine_splits, pdl_combine), "_gluon": gluon_prefill knobs',
    )
    ap.add_argument(
        "--small-shape",
        default="{}",
        help="JSON: the small suite's attention shape over the article's (num_q_heads, ...)",
    )
    ap.add_argument("--config", default="{}", help="JSON prefill plan config (+ launch keys)")
    ap.add_argument(
        "--launch-configs",
        default="",
        help="JSON (or a file of it) of per-class launch configs (PREFILL_LAUNCH_CONFIGS)",
    )
    ap.add_argument(
        "--launch-configs-out", type=Path, default=None, help="write the class configs used"
    )
    ap.add_argument("--prefix-config", default="{}", help="JSON cascade prefix-pass config")
    ap.add_argument(
        "--cascade-variants",
        default="",
        help="JSON list of [prefix-pass config, decode config] pairs: one cascade row each "
        "(instead of the prefix-split sweep)",
    )
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("kernels.bench_prefill needs a CUDA GPU.")
        return 2

    def log(msg: str) -> None:
        print(msg, flush=True)

    from kernels.paged_prefill import (
        CLASS_KEYS,
        DEFAULT_PREFILL_CONFIG,
        PREFILL_LAUNCH_CONFIGS,
        set_prefill_launch_configs,
    )

    if args.launch_configs:
        set_prefill_launch_configs(load_json_arg(args.launch_configs))
    if args.candidates:
        cands = load_json_arg(args.candidates)
        for cls in list(TUNE_SHAPES):
            if cls not in cands:
                del TUNE_SHAPES[cls]
        TUNE_CANDIDATES.update(cands)
    if args.tune_shapes:  # these classes, in this order
        given = load_json_arg(args.tune_shapes)
        TUNE_SHAPES.clear()
        TUNE_SHAPES.update({cls: [(int(c), int(n)) for c, n in v] for cls, v in given.items()})
    if args.tune_only:
        env = environment()
        log(f"# {env}")

        def on_best(best: dict) -> None:
            if args.launch_configs_out:
                table = {
                    k: {
                        **PREFILL_LAUNCH_CONFIGS[k],
                        **{a: b for a, b in v.items() if a in CLASS_KEYS},
                    }
                    for k, v in best.items()
                }
                args.launch_configs_out.write_text(json.dumps(table, indent=1) + "\n")

        best, trials = tune_prefill(log, args.tune_budget, on_best=on_best)
        on_best(best)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"env": env, "tuned": best, "trials": trials}, indent=1))
        log(f"# tuned launch configs: {best}")
        return 0
    env = environment()
    log(f"# {env}")
    copy_tbps = copy_ceiling_tbps()
    mm = matmul_tflops()
    log(f"# copy ceiling {copy_tbps:.3f} TB/s; bf16 8192^3 matmul {mm:.0f} TFLOP/s")
    result: dict = {"env": env, "copy_tbps": copy_tbps, "matmul_tflops": mm, "shape": ARTICLE_SHAPE}
    cfg = {**DEFAULT_PREFILL_CONFIG, **json.loads(args.config)}
    suites = set(args.suite.split(","))

    def save():
        args.out.parent.mkdir(parents=True, exist_ok=True)
        result["graph_fallbacks"] = list(GRAPH_FALLBACKS)
        args.out.write_text(json.dumps(result, indent=1))

    if args.tune:
        best, trials = tune_prefill(log, args.tune_budget)
        result["tune_trials"] = trials
        set_prefill_launch_configs(best)
        log(f"# tuned launch configs: {best}")
    result["prefill_config"] = cfg
    result["prefill_launch_configs"] = {k: dict(v) for k, v in PREFILL_LAUNCH_CONFIGS.items()}
    log(f"# launch configs used: {result['prefill_launch_configs']}")
    if args.launch_configs_out:
        args.launch_configs_out.write_text(
            json.dumps(result["prefill_launch_configs"], indent=1) + "\n"
        )
    save()
    if "prefill" in suites:
        rows = result.setdefault("prefill", [])
        cases = [(c, n) for c in PREFILL_CONTEXTS for n in PREFILL_CHUNKS]
        cases += [(32768, n) for n in SMALL_CHUNKS if (32768, n) not in cases]
        for c, n in cases:
            flex = args.flex and (c, n) in FLEX_CASES
            row = prefill_row(c, n, cfg, copy_tbps, mm, sdpa=not args.no_sdpa, flex=flex)
            rows.append(row)
            sd = row.get("sdpa_ms") or {}
            fl = f" flex {row['flex_tflops']:.0f}" if row.get("flex_tflops") else ""
            log(
                f"  prefill c={c} n={n} [{row['work_class']}]: {row['ms']:.4f} ms "
                f"{row['tflops']:.0f} TFLOP/s ({row['x_roofline']:.2f}x roofline "
                f"{row['roofline_ms']:.4f} [{row['roofline_bound']}], "
                f"{row['x_kv_roofline']:.2f}x KV@copy, floor {row['flop_floor_ms']:.4f}) "
                f"sdpa " + " ".join(f"{k} {v:.4f}" for k, v in sd.items()) + fl
            )
            save()
    if "small" in suites:
        cases = [(int(c), int(n)) for c, n in load_json_arg(args.small_cases)]
        shape = {**ARTICLE_SHAPE, **json.loads(args.small_shape)}
        result["small_shape"] = shape
        result["small"] = small_chunk_rows(cases, load_json_arg(args.small_variants), log, shape)
        save()
    if "cascade" in suites:
        from kernels.cascade_decode import DEFAULT_PREFIX_CONFIG

        pcfg = {**DEFAULT_PREFIX_CONFIG, **json.loads(args.prefix_config)}
        result["cascade"] = []
        variants: list[tuple[dict, dict]] = [
            (dict(pcfg, programs_per_sm=pps), {})
            for pps in sorted({pcfg["programs_per_sm"], *((1, 2) if args.cascade_sweep else ())})
        ]
        if args.cascade_variants:
            variants = [({**pcfg, **p}, d) for p, d in json.loads(args.cascade_variants)]
        for prefix_cfg, decode_cfg in variants:
            result["cascade"] += cascade_rows(copy_tbps, prefix_cfg, decode_cfg, log)
            save()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
