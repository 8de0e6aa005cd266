"""Encoded size of the page index (sim/page_index_codec.py) against a plain list of 64-bit ids.

    python -m benchmarks.page_index_size                 # 80,000 pages, 64 KiB message limit
    python -m benchmarks.page_index_size --pages 20000 --message-bytes 4096

For each density d the wanted pages are a subset of a range of about pages / d page ids on one
remote node: either each id wanted independently (random) or runs of 16 consecutive pages (what a pool that
allocates from a free list tends to hand out). Every row is checked: decode(encode(x)) == x.
The last table gives how many pages one message carries at each density (the article: one
handshake carries the location of 80,000 pages).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sim.xnode.network import LINK_PRESETS
from sim.xnode.page_index_codec import decode, encode, encoded_size, kind_counts, normalize

DENSITIES = (1.0, 0.5, 0.25, 0.1, 0.05, 0.01)
RUN_PAGES = 16
SEARCH_CAP = 1_000_000


def page_set(rng: np.random.Generator, num_pages: int, density: float, layout: str) -> np.ndarray:
    """num_pages distinct ids spread over a range of num_pages / density ids."""
    if layout == "random":  # independent gaps: each id wanted with probability `density`
        return np.cumsum(rng.geometric(density, size=num_pages)) - 1
    span = int(round(num_pages / density))
    num_runs = -(-num_pages // RUN_PAGES)
    starts = np.sort(rng.choice(span // RUN_PAGES, size=num_runs, replace=False)) * RUN_PAGES
    return (starts[:, None] + np.arange(RUN_PAGES)).reshape(-1)[:num_pages]


def measure(pages: np.ndarray) -> dict:
    t = time.perf_counter()
    data = encode({1: pages})
    encode_ms = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    back = decode(data)
    decode_ms = (time.perf_counter() - t) * 1e3
    assert back == normalize({1: pages}) and encoded_size({1: pages}) == len(data)
    return {
        "bytes": len(data),
        "kinds": kind_counts(pages),
        "encode_ms": encode_ms,
        "decode_ms": decode_ms,
    }


def size_table(num_pages: int, message_bytes: int, rng: np.random.Generator) -> None:
    plain = num_pages * 8
    print(
        f"| layout | density | id range | codec bytes | bytes/page | chunks (bitmap/runs/list) | "
        f"64-bit list bytes | codec msgs | list msgs | fits one {message_bytes} B message | encode ms | decode ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for layout in ("random", "runs16"):
        for d in DENSITIES:
            pages = page_set(rng, num_pages, d, layout)
            m = measure(pages)
            k = m["kinds"]
            print(
                f"| {layout} | {d:.0%} | {int(pages[-1]) + 1:,} | {m['bytes']:,} | {m['bytes'] / num_pages:.3f} | "
                f"{k['bitmap']}/{k['runs']}/{k['list']} | {plain:,} | {-(-m['bytes'] // message_bytes)} | "
                f"{-(-plain // message_bytes)} | {'yes' if m['bytes'] <= message_bytes else 'no'} | "
                f"{m['encode_ms']:.1f} | {m['decode_ms']:.1f} |"
            )


def capacity_table(message_bytes: int, rng: np.random.Generator) -> None:
    """Most random pages at each density whose index fits one message (binary search)."""
    print(f"\n| density | pages in one {message_bytes} B message (random layout) | 64-bit list |")
    print("|---|---|---|")
    for d in DENSITIES:
        lo, hi = 1, SEARCH_CAP
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if encoded_size({1: page_set(rng, mid, d, "random")}) <= message_bytes:
                lo = mid
            else:
                hi = mid - 1
        shown = f"> {SEARCH_CAP:,} (search cap)" if lo == SEARCH_CAP else f"{lo:,}"
        print(f"| {d:.0%} | {shown} | {message_bytes // 8:,} |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=80_000)
    p.add_argument(
        "--message-bytes", type=int, default=LINK_PRESETS["rdma-400g"]["max_message_bytes"]
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    size_table(args.pages, args.message_bytes, rng)
    capacity_table(args.message_bytes, rng)


if __name__ == "__main__":
    main()
