"""Eviction rounds in a real run: CPU microseconds per round and pages scored per round.

    python -m benchmarks.eviction_round                   # engine (scored + zone) and LRU arms
    python -m benchmarks.eviction_round --nodes 2 --seconds 300

Setup: the seed workload at 25 closed-loop clients per node (Llama-3-8B on H200) for
`--seconds`; the pools fill after ~2 simulated minutes, then every allocation that finds no free
page runs an eviction round (at least `eviction_batch_pages` = 64 pages). Each round's CPU time
is measured around the cache's round (the machine is shared: CPU, not wall) and the pages its
policy scored are counted, over all rounds of the run. Also the run's whole CPU time, for scale.
"""

from __future__ import annotations

import argparse
import time

from kvsched.experiment import resolve_arms, run_arm
from policies.eviction import FIFO, LFU, LRU, Scored
from sim.kv.paged_cache import PagedKVCache


def measure(arm: str, nodes: int, seconds: float) -> dict[str, float]:
    counts = {"rounds": 0, "cpu_s": 0.0, "scored": 0}
    evict = PagedKVCache._evict
    scorers = {cls: cls.priority for cls in (LRU, LFU, FIFO, Scored)}

    def timed_evict(self, need, now):
        cpu = time.process_time()
        evict(self, need, now)
        counts["cpu_s"] += time.process_time() - cpu
        counts["rounds"] += 1

    def counted(priority):
        def scored(self, stats, pages, now):
            counts["scored"] += len(pages)
            return priority(self, stats, pages, now)

        return scored

    raw = {"duration_s": seconds, "cluster": {"num_nodes": nodes}}
    raw["workload"] = {"name": "seed", "params": {"num_clients": 25 * nodes}}
    PagedKVCache._evict = timed_evict  # type: ignore[method-assign]
    for cls, priority in scorers.items():
        cls.priority = counted(priority)  # type: ignore[method-assign]
    try:
        cpu = time.process_time()
        run_arm(resolve_arms(raw, [arm])[arm], arm, show_progress=False)
        counts["run_cpu_s"] = time.process_time() - cpu
    finally:
        PagedKVCache._evict = evict  # type: ignore[method-assign]
        for cls, priority in scorers.items():
            cls.priority = priority  # type: ignore[method-assign]
    return counts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=400.0, help="simulated seconds")
    ap.add_argument("--arms", nargs="*", default=["engine", "paged+prefix"])
    args = ap.parse_args(argv)
    for arm in args.arms:
        c = measure(arm, args.nodes, args.seconds)
        rounds = max(1, int(c["rounds"]))
        print(
            f"{arm}: {int(c['rounds'])} eviction rounds, {c['cpu_s'] / rounds * 1e6:.0f} us CPU "
            f"per round, {c['scored'] / rounds:.0f} pages scored per round; rounds "
            f"{c['cpu_s']:.2f} s of the run's {c['run_cpu_s']:.2f} s CPU"
        )


if __name__ == "__main__":
    main()
