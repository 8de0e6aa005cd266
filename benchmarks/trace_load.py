"""Load a trace and replay its prompts: wall time and memory, against materialising every prompt.

Usage: .venv/bin/python benchmarks/trace_load.py [FILE] [--format mooncake]
Default FILE: the Mooncake conversation trace (12,031 requests) in ../shared/traces.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from workloads import make_workload
from workloads.trace_loaders import load_trace

DEFAULT = "../shared/traces/mooncake_fast25/conversation_trace.jsonl"


def measure(fn):
    """(result, wall seconds untraced, peak traced bytes of a second, traced run)."""
    started = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - started
    tracemalloc.start()  # tracing slows allocation-heavy code several-fold: time it apart
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, wall, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=DEFAULT)
    ap.add_argument("--format", default="mooncake")
    args = ap.parse_args()

    trace, load_s, load_peak = measure(lambda: load_trace(args.file, args.format))
    held = sum(
        getattr(trace, f).nbytes
        for f in (
            "arrival_s",
            "input_length",
            "output_length",
            "request_id",
            "session_id",
            "priority",
            "block_start",
            "block_ids",
            "token_start",
            "tokens",
        )
    )
    unique_blocks = int(np.unique(trace.block_ids).size)
    total_tokens = int(trace.input_length.sum())

    def replay() -> int:  # pull every request as the simulator does, keeping none
        params = {"path": args.file, "format": args.format}
        w = make_workload("trace", params, np.random.default_rng(0))
        return sum(r.prompt_tokens for r in w.requests)

    built, replay_s, replay_peak = measure(replay)
    assert built == total_tokens
    mb = 1e6
    print(f"file: {args.file}")
    print(
        f"requests {len(trace):,}; blocks {trace.block_ids.size:,} ({unique_blocks:,} unique); "
        f"prompt tokens {total_tokens:,}"
    )
    print(
        f"load (parse + validate every row): {load_s:.2f} s wall, peak traced memory {load_peak / mb:.1f} MB"
    )
    print(f"loaded trace holds {held / mb:.2f} MB of numpy columns")
    print(
        f"replay: load + build all {len(trace):,} prompts lazily: {replay_s:.2f} s wall, "
        f"peak traced memory {replay_peak / mb:.1f} MB"
    )
    print(
        f"for scale: every prompt materialised = {total_tokens * 4 / mb:,.0f} MB (int32); "
        f"one shared token array per unique block = {unique_blocks * trace.block_size * 4 / mb:,.0f} MB"
    )


if __name__ == "__main__":
    main()
