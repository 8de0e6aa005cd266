"""What a user checks first about a trace: size, timing, lengths, and how much prefix reuse it holds.

Prefix structure is measured in request order only (no timing, no batching):
  infinite cache  every block ever seen stays cached;
  single LRU      one cache of C tokens; after each request its blocks are touched tail first, so
                  the head of a prefix is the most recent and evicted last (as vLLM frees blocks).
A request hits the longest run of leading blocks found in the cache; a block seen before with fewer
tokens (a partial last block) hits only those tokens. Token hits are capped at input_length - 1: an
engine must compute at least one prompt token to emit the first output token. Block hit rate counts
fully covered blocks (Mooncake's 512-token blocks, or `chunk_tokens` chunks of explicit tokens).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from workloads.trace_data import Trace

PERCENTILES = (10, 25, 50, 75, 90, 95, 99)
DEFAULT_CAPACITIES = (1e6, 1e7, 1e8)  # tokens


@dataclass(slots=True)
class Chains:
    """Each request as a path in the prefix tree: node ids and the tokens each block holds."""

    nodes: list[list[int]]
    tokens: list[list[int]]
    input_length: list[int]
    num_nodes: int


def _chunk_key(chunk: np.ndarray) -> int:
    return int.from_bytes(hashlib.blake2b(chunk.tobytes(), digest_size=8).digest(), "little")


def _blocks_of(trace: Trace, i: int, chunk_tokens: int) -> tuple[list[int], list[int]]:
    """(block keys, tokens per block) of row i; empty for rows without content (Azure)."""
    length = int(trace.input_length[i])
    ids = trace.blocks(i)
    if ids.size:
        size = trace.block_size
        return ids.tolist(), [size] * (ids.size - 1) + [length - size * (ids.size - 1)]
    tokens = trace.tokens[trace.token_start[i] : trace.token_start[i + 1]]
    starts = range(0, tokens.shape[0], chunk_tokens)
    return (
        [_chunk_key(tokens[s : s + chunk_tokens]) for s in starts],
        [min(chunk_tokens, tokens.shape[0] - s) for s in starts],
    )


def prefix_chains(trace: Trace, chunk_tokens: int = 16) -> Chains:
    """Map every request's blocks to prefix-tree nodes: equal node = equal key after equal prefix."""
    trie: dict[tuple[int, int], int] = {}
    nodes, tokens = [], []
    for i in range(len(trace)):
        keys, sizes = _blocks_of(trace, i, chunk_tokens)
        parent, path = -1, []
        for key in keys:
            parent = trie.setdefault((parent, key), len(trie))
            path.append(parent)
        nodes.append(path)
        tokens.append(sizes)
    return Chains(nodes, tokens, trace.input_length.tolist(), len(trie))


def _prefix_hit(path: list[int], sizes: list[int], held: dict[int, int]) -> tuple[int, int]:
    """(hit tokens, fully hit blocks) of one request against the cached token counts `held`."""
    hit_tokens = hit_blocks = 0
    for node, size in zip(path, sizes, strict=True):
        got = min(size, held.get(node, 0))
        hit_tokens += got
        if got < size:
            break
        hit_blocks += 1
    return hit_tokens, hit_blocks


def hit_counts(chains: Chains, capacity_tokens: float | None = None) -> tuple[int, int]:
    """(hit tokens, fully hit blocks) of one cache: infinite if capacity_tokens is None, else an
    LRU holding at most capacity_tokens tokens."""
    cache: OrderedDict[int, int] = OrderedDict()  # node -> tokens held; last = most recent
    used = hit_tokens = hit_blocks = 0
    for path, sizes, length in zip(chains.nodes, chains.tokens, chains.input_length, strict=True):
        t, b = _prefix_hit(path, sizes, cache)
        hit_tokens += min(t, length - 1)
        hit_blocks += b
        if capacity_tokens is None:
            for node, size in zip(path, sizes, strict=True):
                if size > cache.get(node, 0):
                    cache[node] = size
            continue
        for node, size in zip(reversed(path), reversed(sizes), strict=True):
            had = cache.pop(node, 0)
            cache[node] = max(had, size)
            used += cache[node] - had
        while used > capacity_tokens:
            used -= cache.popitem(last=False)[1]
    return hit_tokens, hit_blocks


def totals(chains: Chains) -> tuple[int, int]:
    """(prompt tokens, blocks) of all requests: the denominators of the hit rates."""
    return sum(chains.input_length), sum(len(p) for p in chains.nodes)


def hit_rates(chains: Chains, capacity_tokens: float | None = None) -> tuple[float, float]:
    (tokens, blocks), (total_tokens, total_blocks) = (
        hit_counts(chains, capacity_tokens),
        totals(chains),
    )
    return (
        tokens / total_tokens if total_tokens else 0.0,
        blocks / total_blocks if total_blocks else 0.0,
    )


def infinite_cache_hits(chains: Chains) -> tuple[float, float]:
    """(token hit rate, block hit rate) of a cache that never evicts."""
    return hit_rates(chains)


def lru_hits(chains: Chains, capacity_tokens: float) -> tuple[float, float]:
    """(token hit rate, block hit rate) of one LRU cache holding at most capacity_tokens tokens."""
    return hit_rates(chains, capacity_tokens)


def _distribution(values: np.ndarray) -> dict[str, float]:
    out = {"mean": float(values.mean())}
    out.update({f"p{q}": float(np.percentile(values, q)) for q in PERCENTILES})
    out["max"] = float(values.max())
    return out


def timing_stats(arrival_s: np.ndarray) -> dict[str, float | int | None]:
    span = float(arrival_s[-1] - arrival_s[0])
    gaps = np.diff(arrival_s)
    per_minute = np.bincount(((arrival_s - arrival_s[0]) // 60).astype(np.int64))
    return {
        "span_s": span,
        "mean_rate_per_s": (arrival_s.size - 1) / span if span > 0 else None,
        "distinct_timestamps": int(np.unique(arrival_s).size),
        # Burstiness: CV of inter-arrival gaps (1 for Poisson) and the busiest minute over the mean.
        "interarrival_cv": float(gaps.std() / gaps.mean())
        if gaps.size and gaps.mean() > 0
        else None,
        "peak_minute_over_mean": float(per_minute.max() / per_minute.mean())
        if per_minute.size
        else None,
    }


def trace_stats(trace: Trace, capacities=DEFAULT_CAPACITIES, chunk_tokens: int = 16) -> dict:
    """The numbers `kvsched trace stats` prints (one JSON-able dict)."""
    chains = prefix_chains(trace, chunk_tokens)
    token_hit, block_hit = infinite_cache_hits(chains)
    lru = {int(c): lru_hits(chains, c) for c in capacities}
    return {
        "path": trace.path,
        "format": trace.format,
        "records": len(trace),
        "skipped_rows": trace.num_skipped,
        **timing_stats(trace.arrival_s),
        "input_tokens": _distribution(trace.input_length),
        "output_tokens": _distribution(trace.output_length),
        "output_ids": False,  # no supported format carries generated token ids (lengths only)
        "total_input_tokens": int(trace.input_length.sum()),
        "prefix_info": trace.has_content,
        "block_tokens": trace.block_size or (chunk_tokens if trace.tokens.size else None),
        "total_blocks": totals(chains)[1],
        "unique_blocks": chains.num_nodes,
        "infinite_cache_token_hit_rate": token_hit,
        "infinite_cache_block_hit_rate": block_hit,
        "lru_token_hit_rate": {str(c): r[0] for c, r in lru.items()},
        "lru_block_hit_rate": {str(c): r[1] for c, r in lru.items()},
    }
