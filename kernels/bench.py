"""Micro-benchmark of the paged decode kernel on a GPU: `python -m kernels.bench` (`kvsched bench`).

Everything is timed with device events through `triton.testing.do_bench` (median, L2 flushed
before every repetition) on the article's model shape: 64 query heads, 8 KV heads, head_dim 128,
BF16, one layer. In the same run it measures
  * the HBM ceiling: a large device-to-device copy, counting bytes read plus bytes written;
  * contiguous, unpaged SDPA on the same shapes (the no-paging reference): the 8 query heads of
    a group are packed as 8 query rows against their one KV head, so SDPA also reads each KV
    byte once; the fastest of the flash / efficient / cuDNN backends is kept;
  * the grouped and the non-grouped kernel, page sizes 1..128, a batch x context grid and the
    seed mix (100 requests: 90 uniform in 512-8192 tokens, 10 at 32K).
Every measured kernel output is first checked against the float32 reference (rel err < 1e-2).

KV bytes are the bytes the batch's attention must read (K and V of its tokens, each once); the
non-grouped variant asks for `group` times as many, and its `req_bytes` column says so.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ARTICLE_SHAPE = dict(num_q_heads=64, num_kv_heads=8, head_dim=128)
GRID_BATCHES = (1, 16, 64, 256)
GRID_CONTEXTS = (2048, 8192, 32768)
GRID_MAX_TOKENS = 2 * 1024 * 1024  # 8 GB of K+V at the article shape: plenty past the L2
PAGE_SIZES = (1, 8, 16, 32, 64, 128)


def seed_mix_lengths(seed: int = 0, n: int = 100) -> list[int]:
    """The article's load: n requests, 90% uniform in 512-8192 tokens, 10% at 32K (shuffled)."""
    rng = np.random.default_rng(seed)
    n_long = n // 10
    lens = [32768] * n_long + rng.integers(512, 8192, size=n - n_long, endpoint=True).tolist()
    rng.shuffle(lens)
    return [int(x) for x in lens]


def kv_bytes(lens: list[int], num_kv_heads: int, head_dim: int, elem_bytes: int = 2) -> int:
    """Bytes of K and V that one decode step over these sequences must read."""
    return int(sum(lens)) * 2 * num_kv_heads * head_dim * elem_bytes


@dataclass
class Row:
    case: str
    batch: int
    tokens: int
    page_size: int
    variant: str
    ms: float
    kv_bytes: int
    req_bytes: int
    tbps: float
    frac_copy: float
    eager_ms: float | None = None  # the same step launched from Python, no graph
    sdpa_ms: float | None = None
    sdpa_backend: str | None = None
    rel_err: float | None = None
    config: dict = field(default_factory=dict)

    @property
    def vs_sdpa(self) -> float | None:
        """SDPA time / kernel time: >= 1 means the paged kernel is at least as fast."""
        return None if self.sdpa_ms is None else self.sdpa_ms / self.ms


def environment() -> dict:
    import torch
    import triton

    props = torch.cuda.get_device_properties(0)
    return {
        "device": torch.cuda.get_device_name(0),
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# Measurements whose CUDA-graph capture failed and that fell back to eager timing.
GRAPH_FALLBACKS: list[str] = []


def bench_ms(fn, warmup_ms: float = 20, rep_ms: float = 80, graph: bool = True) -> float:
    """Median device time of fn() in ms: events around each repetition, L2 flushed before each.

    graph=True (the default) captures fn once in a CUDA graph and times its replays, as a serving
    engine replays its decode step: the time is the GPU's, not Python's launch path (which
    otherwise sets a ~0.07 ms floor on small decode batches). graph=False, or a capture that
    fails, uses `triton.testing.do_bench` (eager launches, same median and L2 flush).
    Without a GPU (the CPU smoke tests of this module) it returns the wall time of one call.
    """
    import torch

    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    if graph:
        try:
            return _graph_ms(fn, warmup_ms, rep_ms)
        except RuntimeError as exc:
            GRAPH_FALLBACKS.append(f"{type(exc).__name__}: {str(exc)[:120]}")
            torch.cuda.synchronize()
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def _graph_ms(fn, warmup_ms: float, rep_ms: float) -> float:
    import torch

    # Warm up on a side stream (compiles kernels, sets up library handles) before capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")

    def timed(n: int) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for a, b in zip(starts, ends, strict=True):
            flush.zero_()  # cold L2, as each layer reads its own KV and weights
            a.record()
            graph.replay()
            b.record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in zip(starts, ends, strict=True)]

    est = float(np.median(timed(5)))
    timed(max(1, min(200, int(warmup_ms / max(est, 1e-3)))))
    times = timed(max(5, min(1000, int(rep_ms / max(est, 1e-3)))))
    return float(np.median(times))


def copy_ceiling_tbps(gib: int = 4) -> float:
    """Device-to-device copy bandwidth in TB/s, counting bytes read plus bytes written."""
    import torch

    src = torch.empty(gib * 2**30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    # Eager: a copy captured in a CUDA graph became a slower copy node (2.8 vs 4.3 TB/s).
    ms = bench_ms(lambda: dst.copy_(src), graph=False)
    return 2 * gib * 2**30 / (ms * 1e-3) / 1e12


def sdpa_ms(q, kv) -> tuple[float, str]:
    """Fastest contiguous SDPA over the paged batch's K/V (equal lengths only)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels.reference import paged_to_contiguous

    k, v = paged_to_contiguous(kv)  # [B, H_kv, L, D]
    batch, hq, d = q.shape
    qp = q.view(batch, k.shape[1], hq // k.shape[1], d)  # [B, H_kv, group, D]: packed GQA
    best = (float("inf"), "none")
    for backend in (
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.CUDNN_ATTENTION,
    ):
        try:
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(qp, k, v)
                ms = bench_ms(lambda b=backend: _sdpa_call(F, sdpa_kernel, b, qp, k, v))
        except RuntimeError:
            continue
        best = min(best, (ms, backend.name.lower()))
    return best


def _sdpa_call(F, sdpa_kernel, backend, q, k, v):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v)


def make_case(lens: list[int], page_size: int, seed: int = 0):
    import torch

    from kernels.reference import make_paged_kv

    g = torch.Generator(device=device()).manual_seed(seed)
    kv = make_paged_kv(
        lens,
        ARTICLE_SHAPE["num_kv_heads"],
        ARTICLE_SHAPE["head_dim"],
        page_size,
        torch.bfloat16,
        device(),
        g,
    )
    q = torch.randn(
        len(lens),
        ARTICLE_SHAPE["num_q_heads"],
        ARTICLE_SHAPE["head_dim"],
        generator=g,
        device=device(),
    ).to(torch.bfloat16)
    return q, kv


def check_against_reference(q, kv, out, n_check: int = 4) -> float:
    """Rel err of the kernel's output on up to n_check sequences (first and longest)."""
    from kernels.reference import paged_decode_reference

    lens = kv.seq_lens.tolist()
    idx = sorted({0, len(lens) // 2, len(lens) - 1, int(np.argmax(lens))})[:n_check]
    ref = paged_decode_reference(
        q[idx], kv.k_cache, kv.v_cache, kv.block_tables[idx], kv.seq_lens[idx]
    )
    got = out[idx].float()
    return float((got - ref).norm() / ref.norm())


def time_kernel(
    q, kv, grouped: bool = True, eager: bool = False, prepared: bool = False, **cfg
) -> tuple[float, float | None, float]:
    """(graph ms, eager ms or None, rel err) of one paged decode step.

    The output is poisoned before the checked call, so an unwritten element fails the check.
    `prepared`: the launch is prepared once (`prepare_decode`) and only its kernels are timed,
    as each layer of the engine's graphed step issues them; otherwise every timed call prepares
    too, so a fused-combine split launch's counter zeroing (a fill kernel) is in the graph.
    The output of the timed launches is checked again.
    """
    import torch

    from kernels.paged_decode import paged_decode_attention, prepare_decode

    lens = kv.seq_lens.tolist()
    hints: dict[str, Any] = dict(max_seq_len=max(lens), total_tokens=sum(lens))
    if cfg.get("one_wave"):
        hints["lengths"] = lens  # the one-wave rule plans from the host's lengths
    out = torch.full_like(q, float("nan"))
    inputs = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens)
    options = dict(out=out, grouped=grouped, **hints, **cfg)  # the same launch, both ways

    def launch(check_bounds: bool) -> None:
        paged_decode_attention(*inputs, check_bounds=check_bounds, **options)

    # Validate once (bounds, shapes), then time the launch path without the host sync.
    launch(check_bounds=True)
    err = check_against_reference(q, kv, out)
    if not (err < 1e-2) or not bool(torch.isfinite(out).all()):
        raise RuntimeError(f"kernel output wrong: rel err {err} (cfg {cfg}, grouped {grouped})")

    if not prepared:

        def step():
            launch(check_bounds=False)

        return bench_ms(step), (bench_ms(step, graph=False) if eager else None), err
    decode = prepare_decode(*inputs, check_bounds=False, **options)
    out.fill_(float("nan"))
    ms = bench_ms(lambda: decode.launch(kv.k_cache, kv.v_cache))
    eager_ms = (
        bench_ms(lambda: decode.launch(kv.k_cache, kv.v_cache), graph=False) if eager else None
    )
    err = check_against_reference(q, kv, out)
    if not (err < 1e-2) or not bool(torch.isfinite(out).all()):
        raise RuntimeError(f"prepared launch output wrong: rel err {err} (cfg {cfg})")
    return ms, eager_ms, err


def run_case(
    name: str,
    lens: list[int],
    page_size: int,
    grouped: bool,
    copy_tbps: float,
    with_sdpa: bool = False,
    **cfg,
) -> Row:
    import torch

    q, kv = make_case(lens, page_size)
    ms, eager_ms, err = time_kernel(q, kv, grouped=grouped, eager=True, **cfg)
    nbytes = kv.kv_bytes
    group = ARTICLE_SHAPE["num_q_heads"] // ARTICLE_SHAPE["num_kv_heads"]
    row = Row(
        case=name,
        batch=len(lens),
        tokens=sum(lens),
        page_size=page_size,
        variant="grouped" if grouped else "non-grouped",
        ms=ms,
        eager_ms=eager_ms,
        kv_bytes=nbytes,
        req_bytes=nbytes if grouped else nbytes * group,
        tbps=nbytes / (ms * 1e-3) / 1e12,
        frac_copy=nbytes / (ms * 1e-3) / 1e12 / copy_tbps,
        rel_err=err,
        config=dict(cfg),
    )
    if with_sdpa and len(set(lens)) == 1:
        row.sdpa_ms, row.sdpa_backend = sdpa_ms(q, kv)
    del q, kv
    torch.cuda.empty_cache()
    return row


def tune(copy_tbps: float, log) -> tuple[dict, list[dict]]:
    """Pick block_n / num_warps / num_stages, then the split density, on the key shapes."""
    shapes = {
        "1x32K": [32768],
        "16x32K": [32768] * 16,
        "256x2K": [2048] * 256,
        "seed-mix": seed_mix_lengths(),
    }
    cases = {k: make_case(v, 16) for k, v in shapes.items()}
    trials = []

    def score(cfg):
        total = 0.0
        for name, (q, kv) in cases.items():
            ms, _, _ = time_kernel(q, kv, **cfg)
            trials.append({"shape": name, "ms": ms, **cfg})
            total += np.log(ms)
        return total

    best: dict | None = None
    best_score = float("inf")
    for block_n in (32, 64, 128):
        for num_warps in (4, 8):
            for num_stages in (2, 3, 4):
                cfg = dict(block_n=block_n, num_warps=num_warps, num_stages=num_stages)
                try:
                    s = score(cfg)
                except Exception as exc:  # a config that does not compile is skipped
                    log(f"  tune {cfg}: failed ({type(exc).__name__}: {exc})")
                    continue
                log(f"  tune {cfg}: geo-mean {np.exp(s / len(cases)):.4f} ms")
                if s < best_score:
                    best, best_score = cfg, s
    assert best is not None, "no block_n / num_warps / num_stages config compiled"
    for key, values in (("programs_per_sm", (4, 8, 16, 32)), ("min_split_tokens", (128, 512))):
        base = dict(best)
        for value in values:
            cfg = dict(base, **{key: value})
            try:
                s = score(cfg)
            except Exception as exc:  # keep the run going; the log says why
                log(f"  tune {cfg}: failed ({type(exc).__name__}: {exc})")
                continue
            log(f"  tune {cfg}: geo-mean {np.exp(s / len(cases)):.4f} ms")
            if s < best_score:
                best, best_score = cfg, s
    return best, trials


TARGET_SHAPES = [
    (f"{b}x{ctx // 1024}K", [ctx] * b)
    for b in (16, 64, 256)
    for ctx in GRID_CONTEXTS
    if b * ctx <= GRID_MAX_TOKENS
]
# Split sweeps for shapes that miss their target (launcher kwargs on top of the config).
SPLIT_SWEEP = [
    {"programs_per_sm": 8},
    {"programs_per_sm": 4},
    {"programs_per_sm": 32},
    {"min_split_tokens": 1024},
    {"min_split_tokens": 2048},
    {"block_n": 128, "num_warps": 8},
    {"num_stages": 3},
]


def decode_targets(rows: list[Row], add, copy_tbps: float, cfg: dict, log) -> None:
    """Issue-13 decode targets: >= 1.0x SDPA on every batch >= 16 shape, 1 x 128K >= 0.85 of the
    copy ceiling. Shapes that miss get a split/tile sweep (rows with their config)."""
    misses = []
    for name, lens in TARGET_SHAPES:
        row = run_case(name, lens, 16, True, copy_tbps, with_sdpa=True, **cfg)
        add(row)
        if row.vs_sdpa is not None and row.vs_sdpa < 1.0:
            misses.append((name, lens))
    row = run_case("1x128K", [131072], 16, True, copy_tbps, with_sdpa=True, **cfg)
    add(row)
    if row.frac_copy < 0.85:
        misses.append(("1x128K", [131072]))
    log(f"# decode target misses: {[m[0] for m in misses]}")
    for name, lens in misses:
        for extra in SPLIT_SWEEP:
            try:
                add(run_case(name, lens, 16, True, copy_tbps, **{**cfg, **extra}))
            except Exception as exc:  # a config that does not compile is skipped
                log(f"  sweep {name} {extra}: failed ({type(exc).__name__}: {str(exc)[:80]})")


def sweep_shape(spec: Any) -> tuple[str, list[int]]:
    """A decode-sweep shape: "BxC" (B sequences of C tokens; C may end in K), "seed-mix", or
    [name, {"n": N, "lo": LO, "hi": HI, "seed": S}] (N lengths uniform in [LO, HI], numpy's
    default_rng(S); a ragged batch) or [name, [lengths]]."""
    if spec == "seed-mix":
        return "seed-mix", seed_mix_lengths()
    if isinstance(spec, str):
        b, c = spec.lower().split("x")
        ctx = int(c[:-1]) * 1024 if c.endswith("k") else int(c)
        return spec, [ctx] * int(b)
    name, lens = spec
    if isinstance(lens, dict):
        rng = np.random.default_rng(lens.get("seed", 0))
        lens = rng.integers(lens["lo"], lens["hi"], size=lens["n"], endpoint=True).tolist()
    return str(name), [int(x) for x in lens]


def decode_sweep(
    configs: list[dict], copy_tbps: float, log, sdpa: bool = False, shapes: list | None = None
) -> list[dict]:
    """Graph-timed ms of each config on each shape (one set of inputs per shape, reused); with
    `sdpa`, SDPA on the uniform shapes too (one row each, config None). `shapes` (sweep_shape
    specs) replace the default list. A config's "_batch1": true / false times it only on batch-1
    / batch >= 2 shapes; "_prepared": true times the prepared launch (time_kernel)."""
    import torch

    cases = (
        [sweep_shape(s) for s in shapes]
        if shapes
        else [
            *TARGET_SHAPES,
            ("1x32K", [32768]),
            ("1x128K", [131072]),
            ("seed-mix", seed_mix_lengths()),
        ]
    )
    out: list[dict] = []
    for name, lens in cases:
        q, kv = make_case(lens, 16)
        times = []
        ref_ms = None
        if sdpa and len(set(lens)) == 1:
            ref_ms, backend = sdpa_ms(q, kv)
            out.append({"case": name, "config": None, "sdpa_ms": ref_ms, "backend": backend})
        for cfg in configs:
            only = cfg.get("_batch1")
            if only is not None and bool(only) != (len(lens) == 1):
                times.append(float("nan"))
                continue
            kw = {k: v for k, v in cfg.items() if not k.startswith("_")}
            try:
                ms, _, err = time_kernel(q, kv, prepared=bool(cfg.get("_prepared")), **kw)
            except Exception as exc:  # a config that fails is recorded, not fatal
                log(f"  sweep {name} {cfg}: failed ({type(exc).__name__}: {str(exc)[:80]})")
                ms, err = float("nan"), float("nan")
            times.append(ms)
            out.append(
                {"case": name, "config": cfg, "ms": ms, "rel_err": err, "kv_bytes": kv.kv_bytes}
            )
        frac = [kv.kv_bytes / (t * 1e-3) / 1e12 / copy_tbps for t in times]
        vs = [f" {ref_ms / t:.3f}s" if ref_ms else "" for t in times]
        log(
            f"  {name:<9} "
            + (f"sdpa {ref_ms:.4f} | " if ref_ms else "")
            + " | ".join(f"{t:.4f} ms {f:.2f}x{v}" for t, f, v in zip(times, frac, vs, strict=True))
        )
        del q, kv
        torch.cuda.empty_cache()
    return out


def fmt_table(rows: list[Row]) -> str:
    head = (
        f"{'case':<10}{'page':>5} {'variant':<12}{'ms':>9}{'eager':>8}{'KV MB':>9}{'req MB':>9}"
        f"{'TB/s':>7}{'xcopy':>7}{'sdpa ms':>9}{'sdpa/k':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        sd = f"{r.sdpa_ms:9.4f}{r.vs_sdpa:8.2f}" if r.sdpa_ms is not None else f"{'-':>9}{'-':>8}"
        lines.append(
            f"{r.case:<10}{r.page_size:>5} {r.variant:<12}{r.ms:9.4f}{r.eager_ms or 0:8.3f}"
            f"{r.kv_bytes / 1e6:9.1f}"
            f"{r.req_bytes / 1e6:9.1f}{r.tbps:7.2f}{r.frac_copy:7.2f}{sd}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kvsched bench", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench.json"), help="JSON with every row")
    ap.add_argument("--tune", action="store_true", help="search kernel configs first")
    ap.add_argument("--quick", action="store_true", help="headline cases only")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="launch 16x32K once per variant and exit (run under ncu to count DRAM bytes)",
    )
    ap.add_argument(
        "--targets",
        action="store_true",
        help="the decode targets only: every batch >= 16 grid shape vs SDPA, 1 x 128K vs the "
        "copy ceiling, and a split sweep on the shapes that miss",
    )
    ap.add_argument(
        "--decode-sweep",
        default="",
        help="JSON list of launcher configs: time each on the decode target shapes, 1 x 32K, "
        "1 x 128K and the seed mix (cases built once), then stop",
    )
    ap.add_argument(
        "--sweep-sdpa", action="store_true", help="--decode-sweep: SDPA on the uniform shapes too"
    )
    ap.add_argument(
        "--sweep-shapes",
        default="",
        help='--decode-sweep: JSON list of shapes instead of the default ones ("16x8K", '
        '"seed-mix", [name, {"n": 64, "lo": 1024, "hi": 8192, "seed": 1}], [name, [lengths]])',
    )
    ap.add_argument("--config", default="{}", help="JSON kwargs for the launcher")
    ap.add_argument(
        "--prefill",
        action="store_true",
        help="run the paged prefill + cascade decode bench instead (kernels.bench_prefill; "
        "--out and --config are passed on)",
    )
    args = ap.parse_args(argv)
    if args.prefill:
        from kernels.bench_prefill import main as prefill_main

        return prefill_main(["--out", str(args.out), "--config", args.config])

    import torch

    if not torch.cuda.is_available():
        print("kvsched bench needs a CUDA GPU (the kernels' correctness tests run on CPU).")
        return 2

    def log(msg: str) -> None:
        print(msg, flush=True)

    if args.profile:
        from kernels.paged_decode import paged_decode_attention

        q, kv = make_case([32768] * 16, 16)
        for grouped in (True, False):
            paged_decode_attention(
                q,
                kv.k_cache,
                kv.v_cache,
                kv.block_tables,
                kv.seq_lens,
                grouped=grouped,
                **json.loads(args.config),
            )
        torch.cuda.synchronize()
        return 0

    env = environment()
    log(f"# {env}")
    copy_tbps = copy_ceiling_tbps()
    log(f"# copy ceiling: {copy_tbps:.3f} TB/s (read + write)")
    result: dict = {"env": env, "copy_tbps": copy_tbps, "shape": ARTICLE_SHAPE}
    cfg: dict = json.loads(args.config)
    if args.tune:
        cfg, trials = tune(copy_tbps, log)
        result["tune_trials"] = trials
        log(f"# tuned config: {cfg}")
    from kernels.paged_decode import DEFAULT_CONFIG

    result["config"] = {**DEFAULT_CONFIG, **cfg}

    rows: list[Row] = []

    def add(row: Row) -> None:
        rows.append(row)
        sd = f" sdpa {row.sdpa_ms:.4f} ms ({row.sdpa_backend})" if row.sdpa_ms else ""
        log(
            f"  {row.case} ps{row.page_size} {row.variant}: {row.ms:.4f} ms, "
            f"{row.tbps:.2f} TB/s ({row.frac_copy:.2f} of copy), eager {row.eager_ms:.4f} ms{sd}"
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    **result,
                    "graph_fallbacks": GRAPH_FALLBACKS,
                    "rows": [asdict(r) | {"vs_sdpa": r.vs_sdpa} for r in rows],
                },
                indent=1,
            )
        )

    if args.decode_sweep:
        sweep = json.loads(args.decode_sweep)
        shapes = json.loads(args.sweep_shapes) if args.sweep_shapes else None
        result["sweep"] = decode_sweep(sweep, copy_tbps, log, sdpa=args.sweep_sdpa, shapes=shapes)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        return 0
    if args.targets:
        decode_targets(rows, add, copy_tbps, cfg, log)
        print(fmt_table(rows))
        return 0
    headline = [("1x32K", [32768]), ("16x32K", [32768] * 16), ("256x2K", [2048] * 256)]
    mix = seed_mix_lengths()
    for name, lens in headline:
        add(run_case(name, lens, 16, True, copy_tbps, with_sdpa=True, **cfg))
    add(run_case("seed-mix", mix, 16, True, copy_tbps, **cfg))
    for name, lens in [*headline, ("seed-mix", mix)]:
        add(run_case(name, lens, 16, False, copy_tbps, **cfg))
    for ps in PAGE_SIZES:
        if ps != 16:
            add(run_case("seed-mix", mix, ps, True, copy_tbps, **cfg))
    if not args.quick:
        for ps in PAGE_SIZES:
            add(run_case("64x8K", [8192] * 64, ps, True, copy_tbps, **cfg))
        for b in GRID_BATCHES:
            for ctx in GRID_CONTEXTS:
                name = f"{b}x{ctx // 1024}K"
                if b * ctx > GRID_MAX_TOKENS or name in dict(headline):
                    continue
                add(run_case(name, [ctx] * b, 16, True, copy_tbps, with_sdpa=True, **cfg))
    print()
    print(f"{env['device']} | torch {env['torch']} | triton {env['triton']} | {env['date']}")
    print(f"copy ceiling {copy_tbps:.2f} TB/s; kernel config {cfg or 'defaults'}")
    print(fmt_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
