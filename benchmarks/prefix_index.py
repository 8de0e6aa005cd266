"""Prefix index speed with 1M cached pages: page inserts/s and page lookups/s, per index kind.

    python -m benchmarks.prefix_index                     # two_level, radix, hash_only; 1M pages
    python -m benchmarks.prefix_index --pages 200000 --kinds radix

Setup (one process, one core, page_size 16): `--trunks` shared trunks of 128 pages (2,048-token
system prompts) and, on random trunks, branches of 64-448 pages of their own until `--pages`
pages are cached. Inserts go in chunks of up to 512 pages (an 8,192-token prefill chunk), as the
cache stores a request's pages chunk by chunk. Lookups: each query is a cached prompt (its trunk
and branch, so 128-576 pages match) plus a 16-page uncached tail, or, one time in five, a cold
prompt whose first key misses. A lookup = `index.match` (the hash walk and the level-2 token
compare, or the radix walk); page keys are the request's own work, done once at dispatch, and
timed apart. Reported: pages indexed per second, pages matched per second, lookups per second.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sim.kv.hashing import page_keys
from sim.kv.index_base import ROOT
from sim.kv.paged_cache import make_index

PAGE = 16
TRUNK_PAGES = 128
CHUNK_PAGES = 512


def make_prompts(num_pages: int, num_trunks: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Token ids of every cached prompt (trunks first), num_pages full pages in all."""
    trunks = [
        rng.integers(0, 128256, TRUNK_PAGES * PAGE, dtype=np.int32) for _ in range(num_trunks)
    ]
    prompts, total = list(trunks), num_trunks * TRUNK_PAGES
    while total < num_pages:
        own = min(int(rng.integers(64, 449)), num_pages - total)
        branch = rng.integers(0, 128256, own * PAGE, dtype=np.int32)
        prompts.append(np.concatenate([trunks[int(rng.integers(num_trunks))], branch]))
        total += own
    return prompts


def insert_all(index, prompts: list[np.ndarray], keys: list[np.ndarray]) -> tuple[int, float]:
    """Index every prompt's uncached pages chunk by chunk; (pages indexed, seconds)."""
    next_page, indexed, elapsed = 0, 0, 0.0
    for tokens, k in zip(prompts, keys, strict=True):
        num = tokens.size // PAGE
        matched = index.match(k, tokens, num).pages  # the trunk, when it is already cached
        parent = matched[-1] if matched else ROOT
        first = len(matched)
        rows = tokens[: num * PAGE].reshape(num, PAGE)
        for start in range(first, num, CHUNK_PAGES):
            end = min(num, start + CHUNK_PAGES)
            pages = list(range(next_page, next_page + end - start))
            next_page += end - start
            t0 = time.perf_counter()
            placed = index.insert_chain(pages, k[start:end].tolist(), parent, rows[start:end])
            elapsed += time.perf_counter() - t0
            indexed += len(placed)
            parent = pages[-1]
    return indexed, elapsed


def make_queries(prompts: list[np.ndarray], num: int, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for _ in range(num):
        tail = rng.integers(0, 128256, PAGE * 16, dtype=np.int32)
        if rng.random() < 0.2:
            out.append(tail)
        else:
            out.append(np.concatenate([prompts[int(rng.integers(len(prompts)))], tail]))
    return out


def bench(kind: str, num_pages: int, num_trunks: int, num_queries: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    prompts = make_prompts(num_pages, num_trunks, rng)
    t0 = time.perf_counter()
    keys = [page_keys(p, PAGE) for p in prompts]
    hash_s = time.perf_counter() - t0
    index = make_index(kind, num_pages, PAGE)
    indexed, insert_s = insert_all(index, prompts, keys)
    queries = make_queries(prompts, num_queries, rng)
    query_keys = [page_keys(q, PAGE) for q in queries]
    matched = 0
    t0 = time.perf_counter()
    for q, k in zip(queries, query_keys, strict=True):
        matched += len(index.match(k, q, (q.size - 1) // PAGE).pages)
    lookup_s = time.perf_counter() - t0
    return {
        "kind": kind,
        "cached_pages": len(index),
        "inserts_per_s": indexed / insert_s,
        "matched_pages": matched,
        "page_lookups_per_s": matched / lookup_s,
        "lookups_per_s": num_queries / lookup_s,
        "hash_pages_per_s": num_pages / hash_s,
        "index_bytes_modelled": index.overhead_bytes(),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=1_000_000, help="cached pages (default 1M)")
    ap.add_argument("--trunks", type=int, default=1000, help="shared 128-page trunks")
    ap.add_argument("--queries", type=int, default=20_000, help="lookups timed")
    ap.add_argument(
        "--kinds", default="two_level,radix,hash_only", help="index kinds, comma-separated"
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(
        f"{'index':>10} {'cached pages':>12} {'inserts/s':>11} {'page lookups/s':>15} {'lookups/s':>10} "
        f"{'keys/s':>11} {'index MB':>9}"
    )
    for kind in args.kinds.split(","):
        r = bench(kind.strip(), args.pages, args.trunks, args.queries, args.seed)
        print(
            f"{r['kind']:>10} {r['cached_pages']:>12,} {r['inserts_per_s']:>11,.0f} "
            f"{r['page_lookups_per_s']:>15,.0f} {r['lookups_per_s']:>10,.0f} {r['hash_pages_per_s']:>11,.0f} "
            f"{r['index_bytes_modelled'] / 1e6:>9.1f}"
        )


if __name__ == "__main__":
    main()
