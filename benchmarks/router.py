"""Router decision cost: the real router code (sim/router.py + policies) on 8 nodes, 100k prefixes.

    python -m benchmarks.router                       # every policy, 100k cached prefixes
    python -m benchmarks.router --policies prefix_affinity --prefixes 20000

Setup (one process, one core): a real `Cluster` of 8 nodes (the default model and GPU) whose
routing table is filled through its cache-event API with `--prefixes` cached prefixes: 1,000
shared trunks of 128 pages (2,048 tokens: system prompts, documents), each cached on 1-3 nodes,
and per prefix its own 16-page continuation on one of the trunk's nodes. Each node also holds 12
queued requests (so the views sum real queues). Each query is a cached prefix plus a fresh tail of
32-512 pages (512-8,192 tokens), or, one time in five, a cold prompt of that length. Policies that
learn from their own decisions (sglang_cache_aware, decentralized) first route every cached prefix
once, untimed. A decision = RouteQuery + node views + table walk + the policy, as in a simulation
run; hashing the prompt into page keys is the request's own incremental work (the article keeps
the hash per request) and is timed apart.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from policies import make_policy
from policies.registry import ROUTING
from sim.cluster import Cluster
from sim.config import parse_config
from sim.kv.hashing import page_keys
from sim.request import Request, Workload
from sim.sequence import Sequence

NUM_NODES = 8
TRUNKS = 1000
TRUNK_PAGES = 128
CONT_PAGES = 16
QUEUED_PER_NODE = 12


def build_cluster(policy: str, rng: np.random.Generator) -> Cluster:
    cfg = parse_config(
        {"cluster": {"num_nodes": NUM_NODES}, "policies": {"routing": {"name": policy}}}
    )
    return Cluster(cfg, Workload("bench", iter(())), rng, make_policy)


def random_keys(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 2**63, size=n, dtype=np.int64).astype(np.uint64)


def cached_prefixes(
    rng: np.random.Generator, num_prefixes: int
) -> list[tuple[np.ndarray, list[int]]]:
    """(keys, nodes holding them) of every cached prefix."""
    trunks = [random_keys(rng, TRUNK_PAGES) for _ in range(TRUNKS)]
    holders = [
        rng.choice(NUM_NODES, size=int(rng.integers(1, 4)), replace=False).tolist() for _ in trunks
    ]
    out = []
    for p in range(num_prefixes):
        t = p % TRUNKS
        keys = np.concatenate([trunks[t], random_keys(rng, CONT_PAGES)])
        out.append((keys, [holders[t][int(rng.integers(len(holders[t])))]]))
    return out


def fill(cluster: Cluster, prefixes, rng: np.random.Generator) -> None:
    """Cache events for every prefix; a dozen queued requests per node."""
    for keys, nodes in prefixes:
        for node in nodes:
            cluster.table.on_cache_event("stored", keys.tolist(), node)
    for node in cluster.nodes:
        for _ in range(QUEUED_PER_NODE):
            node.waiting.append(make_seq(rng, random_keys(rng, int(rng.integers(32, 513)))))


def make_seq(rng: np.random.Generator, keys: np.ndarray, request_id: int = 0) -> Sequence:
    prompt = np.zeros(keys.shape[0] * 16, dtype=np.int32)
    return Sequence(req=Request(request_id, prompt, output_tokens=256), keys=keys, arrival_s=0.0)


def queries(rng: np.random.Generator, prefixes, n: int) -> list[Sequence]:
    out = []
    for i in range(n):
        tail = random_keys(rng, int(rng.integers(32, 513)))
        if rng.random() < 0.2:
            keys = tail
        else:
            keys = np.concatenate([prefixes[int(rng.integers(len(prefixes)))][0], tail])
        out.append(make_seq(rng, keys, i))
    return out


def time_decisions(cluster: Cluster, seqs: list[Sequence]) -> np.ndarray:
    """float64 [n]: seconds per decision."""
    out = np.empty(len(seqs))
    decide, clock = cluster.router.decide, time.thread_time_ns  # CPU time of this thread: one core
    for i, seq in enumerate(seqs):
        t = clock()
        decide(seq)
        out[i] = clock() - t
    return out * 1e-9


def bench_policy(policy: str, num_prefixes: int, num_queries: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    cluster = build_cluster(policy, np.random.default_rng(seed + 1))
    prefixes = cached_prefixes(rng, num_prefixes)
    fill(cluster, prefixes, rng)
    if not cluster.router.needs_prefix_match:  # learns from its own decisions: warm it up
        for keys, _ in prefixes:
            cluster.router.decide(make_seq(rng, keys))
    times = time_decisions(cluster, queries(rng, prefixes, num_queries))
    return {
        "policy": policy,
        "table_keys": len(cluster.table.key_to_nodes),
        "mean_s": times.mean(),
        "p50_s": float(np.percentile(times, 50)),
        "p99_s": float(np.percentile(times, 99)),
    }


def time_hashing(rng: np.random.Generator, n: int = 2000) -> float:
    prompts = [
        rng.integers(0, 128000, size=int(rng.integers(512, 8193)) + 2048, dtype=np.int32)
        for _ in range(n)
    ]
    t = time.perf_counter()
    for prompt in prompts:
        page_keys(prompt, 16)
    return (time.perf_counter() - t) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--policies", default=",".join(ROUTING), help="comma-separated routing policies"
    )
    ap.add_argument("--prefixes", type=int, default=100_000, help="cached prefixes in the table")
    ap.add_argument("--queries", type=int, default=20_000, help="timed decisions per policy")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(
        f"{NUM_NODES} nodes, {args.prefixes} cached prefixes, {args.queries} decisions per policy"
    )
    print(
        f"{'policy':>20} {'table keys':>10} {'decisions/s':>12} {'mean us':>8} {'p50 us':>7} {'p99 us':>7}"
    )
    for policy in args.policies.split(","):
        r = bench_policy(policy.strip(), args.prefixes, args.queries, args.seed)
        print(
            f"{r['policy']:>20} {r['table_keys']:>10} {1 / r['mean_s']:>12,.0f} {r['mean_s'] * 1e6:>8.1f} "
            f"{r['p50_s'] * 1e6:>7.1f} {r['p99_s'] * 1e6:>7.1f}"
        )
    print(
        f"hashing a seed-length prompt (2,560-10,240 tokens) into page keys: "
        f"{time_hashing(np.random.default_rng(args.seed)) * 1e6:.1f} us (per request, not per decision)"
    )


if __name__ == "__main__":
    main()
