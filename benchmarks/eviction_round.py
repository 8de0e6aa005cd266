"""Eviction round cost on a full node: CPU microseconds per round and pages scored per round.

    python -m benchmarks.eviction_round                  # engine arm (scored + zone), LRU arm
    python -m benchmarks.eviction_round --seconds 200 --rounds 200

Setup: one node of the seed workload (25 closed-loop clients, Llama-3-8B on H200) simulated for
`--seconds`, long enough that its pool is full of cached prefixes. Then `--rounds` allocations of
`eviction_batch_pages` (64) pages each, a round of eviction apiece, on a copy of that cache, the
clock advancing 10 ms a round. CPU time (the machine is shared), best of 3 copies.
"""

from __future__ import annotations

import argparse
import copy
import time

from kvsched.experiment import resolve_arms, run_arm
from sim.kv.paged_cache import PagedKVCache


def full_cache(arm: str, seconds: float) -> tuple[PagedKVCache, float]:
    raw = {"duration_s": seconds, "cluster": {"num_nodes": 1}}
    raw["workload"] = {"name": "seed", "params": {"num_clients": 25}}
    cluster, _, _, _ = run_arm(resolve_arms(raw, [arm])[arm], arm, show_progress=False)
    cache = cluster.nodes[0].kv.cache  # type: ignore[attr-defined]
    cache.listeners = []  # no routing table here
    return cache, cluster.env.now


class Counting:
    """The cache's policy, counting the pages it scores."""

    def __init__(self, policy):
        self.policy, self.scored = policy, 0

    def priority(self, stats, pages, now):
        self.scored += len(pages)
        return self.policy.priority(stats, pages, now)


def rounds(cache: PagedKVCache, now: float, num: int) -> tuple[float, float]:
    """(CPU us per round, pages scored per round) over `num` full-pool allocations."""
    batch = cache.eviction_batch_pages
    counting = Counting(cache.eviction)
    cache.eviction = counting
    cpu = time.process_time()
    for i in range(num):
        assert cache.allocate(batch, now + 0.01 * i) is not None
    cpu = time.process_time() - cpu
    return cpu / num * 1e6, counting.scored / num


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seconds", type=float, default=400.0, help="simulated s to fill the pool")
    ap.add_argument("--rounds", type=int, default=100, help="eviction rounds timed")
    ap.add_argument("--arms", nargs="*", default=["engine", "paged+prefix"])
    args = ap.parse_args(argv)
    for arm in args.arms:
        cache, now = full_cache(arm, args.seconds)
        runs = [rounds(copy.deepcopy(cache), now, args.rounds) for _ in range(3)]
        us, scored = min(runs)
        print(
            f"{arm} ({type(cache.eviction).__name__}): {us:.0f} us CPU per eviction round "
            f"(best of 3), {scored:.0f} pages scored per round of {cache.pool.num_cached} cached"
        )


if __name__ == "__main__":
    main()
