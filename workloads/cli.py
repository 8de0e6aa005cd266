"""`kvsched trace stats FILE [FILE ...]`: a trace's size, timing, lengths and prefix-reuse bounds."""

from __future__ import annotations

import json
import math
from pathlib import Path

from sim.config import ConfigError
from workloads.trace import cached_trace, window
from workloads.trace_loaders import FORMATS, detect_format
from workloads.trace_stats import DEFAULT_CAPACITIES, PERCENTILES, trace_stats


def parse_capacities(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--capacities: {text!r} is not a comma-separated list of token counts (e.g. 1e6,1e7)"
        ) from None
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise ConfigError(
            f"--capacities: {text!r}: give one or more positive token counts (e.g. 1e6,1e7)"
        )
    return values


def _check_window(args) -> None:
    if args.chunk_tokens <= 0:
        raise ConfigError("--chunk-tokens: must be a positive number of tokens")
    if not all(math.isfinite(x) for x in (args.start_s, args.end_s or 0.0)):
        raise ConfigError("--start-s/--end-s: must be finite numbers of seconds")
    if args.start_s < 0:
        raise ConfigError("--start-s: must be >= 0 seconds")
    if args.end_s is not None and args.end_s <= args.start_s:
        raise ConfigError(f"--end-s: must be after --start-s ({args.start_s})")
    if args.max_requests is not None and args.max_requests <= 0:
        raise ConfigError("--max-requests: must be a positive count")


def _int(x: float) -> str:
    return f"{x:,.0f}"


def _lengths(d: dict) -> str:
    return (
        f"mean {_int(d['mean'])}  "
        + "  ".join(f"p{q} {_int(d[f'p{q}'])}" for q in PERCENTILES)
        + f"  max {_int(d['max'])}"
    )


def _hit_line(tokens: float, blocks: float) -> str:
    return f"{tokens:.1%} of tokens, {blocks:.1%} of blocks"


# Why cache.cache_outputs cannot reuse one request's answer in another when replaying a trace.
OUTPUT_IDS_NOTE = (
    "lengths only, no token ids (Mooncake rows hash the input only): generated tokens are ids "
    "unique to each request, so with cache.cache_outputs a later turn cannot hit an earlier "
    "answer (only a request's own recompute can); the answer's pages are cached when a later "
    "prompt carries it"
)


def stats_text(s: dict) -> str:
    rate = f"{s['mean_rate_per_s']:.2f} req/s" if s["mean_rate_per_s"] else "-"
    cv = f"{s['interarrival_cv']:.2f}" if s["interarrival_cv"] is not None else "-"
    rows = [
        ("trace", f"{s['path']} ({s['format']})"),
        ("records", f"{s['records']:,} ({s['skipped_rows']} bad rows skipped)"),
        (
            "span",
            f"{s['span_s']:,.1f} s ({s['span_s'] / 60:.1f} min), {s['distinct_timestamps']:,} distinct timestamps",
        ),
        ("arrival rate", rate),
        (
            "burstiness",
            f"inter-arrival CV {cv}; busiest minute {s['peak_minute_over_mean']:.2f}x the mean",
        ),
        ("input tokens", _lengths(s["input_tokens"])),
        ("output tokens", _lengths(s["output_tokens"])),
        ("output ids", OUTPUT_IDS_NOTE if not s.get("output_ids") else "in the file"),
    ]
    if not s["prefix_info"]:
        rows.append(
            ("prefix sharing", "none in the file (lengths and arrivals only): every hit rate is 0")
        )
    else:
        rows.append(
            (
                "blocks",
                f"{s['total_blocks']:,} total, {s['unique_blocks']:,} unique "
                f"({s['block_tokens']} tokens each)",
            )
        )
        rows.append(
            (
                "infinite cache",
                _hit_line(s["infinite_cache_token_hit_rate"], s["infinite_cache_block_hit_rate"]),
            )
        )
        for cap, rate in s["lru_token_hit_rate"].items():
            rows.append((f"LRU {int(cap):,} tokens", _hit_line(rate, s["lru_block_hit_rate"][cap])))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def cmd_stats(args) -> int:
    capacities = parse_capacities(args.capacities) if args.capacities else list(DEFAULT_CAPACITIES)
    _check_window(args)
    results = []
    for path in args.files:
        fmt = args.format or detect_format(path)
        trace = window(
            cached_trace(path, fmt, args.skip_bad_rows), args.start_s, args.end_s, args.max_requests
        )
        if len(trace) == 0:
            raise ConfigError(
                f"{path}: no rows in the window --start-s {args.start_s} --end-s {args.end_s}"
            )
        results.append(trace_stats(trace, capacities, args.chunk_tokens))
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else {"traces": results}, indent=2))
    else:
        print("\n\n".join(stats_text(s) for s in results))
    return 0


def register(sub) -> None:
    trace = sub.add_parser("trace", help="inspect trace files")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True)
    p = trace_sub.add_parser(
        "stats", help="records, timing, lengths and prefix-reuse bounds of a trace"
    )
    p.add_argument("files", nargs="+", type=Path, metavar="FILE")
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="default: .csv is azure; JSONL with hash_ids is mooncake, else jsonl",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")
    p.add_argument(
        "--capacities", help="LRU capacities in tokens, comma-separated (default 1e6,1e7,1e8)"
    )
    p.add_argument(
        "--skip-bad-rows",
        action="store_true",
        help="skip and count invalid rows instead of failing",
    )
    p.add_argument("--start-s", type=float, default=0.0, help="window start, trace seconds")
    p.add_argument("--end-s", type=float, help="window end, trace seconds")
    p.add_argument("--max-requests", type=int, help="keep the first N requests (after the window)")
    p.add_argument(
        "--chunk-tokens", type=int, default=16, help="block size for rows given as token lists"
    )
    p.set_defaults(func=cmd_stats)
