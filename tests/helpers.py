"""Test helpers: an exact latency model and hand-built requests."""

from __future__ import annotations

import numpy as np

from sim.request import Request


class ConstantLatency:
    """A latency model whose every step takes `step_s`: makes simulated times exact."""

    name = "constant"

    def __init__(self, step_s: float = 0.01):
        self.step_s = step_s

    def step_time_s(self, plan) -> float:
        return self.step_s

    def shape_time_s(self, shape) -> float:
        return self.step_s


def sim_node(env, node_id: int, cfg, kv, latency, on_finish, transfer=None):
    """A SimPy node over a pure scheduler, priced by `latency` (+ remote `transfer`)."""
    from policies.params import NoParams
    from policies.scheduling import Newest
    from sim.executor import ModelledExecutor
    from sim.node import Node
    from sim.scheduler import Scheduler

    scheduler = Scheduler(cfg, kv, Newest(NoParams()))
    return Node(env, node_id, scheduler, ModelledExecutor(latency, transfer), on_finish)


def make_request(
    request_id: int, tokens, output_tokens: int = 2, arrival_s: float | None = 0.0, tag: str = ""
) -> Request:
    return Request(
        request_id=request_id,
        prompt=np.asarray(tokens, dtype=np.int32),
        output_tokens=output_tokens,
        arrival_s=arrival_s,
        tag=tag,
    )


def submit_at(env, node, t: float, req: Request, page_size: int = 16):
    """A SimPy process that hands `req` to `node` at simulated time t; returns its Sequence."""
    from sim.kv.hashing import page_keys
    from sim.sequence import Sequence

    seq = Sequence(req=req, keys=page_keys(req.prompt, page_size), arrival_s=t)

    def proc():
        yield env.timeout(t)
        node.submit(seq)

    env.process(proc())
    return seq


def tiny_config(duration_s: float = 10, **fields) -> dict:
    """One small node (Llama-3-8B on one H200) and a short seed workload; override per test."""
    return {
        "name": "tiny",
        "seed": 1,
        "duration_s": duration_s,
        "model": "llama-3-8b",
        "node": {"num_gpus": 1, "tp": 1},
        "cluster": {"num_nodes": 1},
        "workload": {
            "name": "seed",
            "params": {
                "num_clients": 4,
                "input_min": 64,
                "input_max": 256,
                "long_share": 0.0,
                "system_prompt_tokens": 64,
                "output_min": 4,
                "output_max": 8,
            },
        },
        **fields,
    }


def assert_same_cache_state(a, b) -> None:
    """Two PagedKVCache instances that replayed the same requests ended in the same state:
    pages evicted (in all and by prefix depth), free pages, indexed pages."""
    assert a.num_evicted_pages == b.num_evicted_pages
    assert (a.evicted_by_depth == b.evicted_by_depth).all()
    assert (a.pool.free_pages() == b.pool.free_pages()).all()
    assert (a.index.indexed == b.index.indexed).all()


def random_prompt(rng: np.random.Generator, heads: list[np.ndarray], page: int) -> np.ndarray:
    """One of `heads` (shared prefixes) and a random tail of whole and part pages."""
    tail = rng.integers(0, 50, size=page * int(rng.integers(0, 8)) + int(rng.integers(0, 3)))
    return np.concatenate([heads[int(rng.integers(0, len(heads)))], tail]).astype(np.int32)


def place_prompt(cache, tokens: np.ndarray, page: int, now: float):
    """Admit a prompt into a PagedKVCache as the KV manager does: match its cached prefix,
    allocate the rest, store every full page. (the pages allocated or None, all its pages)."""
    from sim.kv.hashing import page_keys

    keys = page_keys(tokens, page)
    match = cache.match_prefix(keys, tokens, now)
    allocated = cache.allocate(-(-tokens.size // page) - len(match.pages), now)
    if allocated is None:
        cache.release(list(match.pages), now)
        return None, []
    pages = list(match.pages) + allocated
    cache.store_pages(pages, keys, tokens, len(match.pages), tokens.size // page, now)
    return allocated, pages


def prefix_affinity_cluster(nodes: int, clients: int, duration_s: float, cache: dict | None = None):
    """Llama-3-8B nodes with a ~400-page KV pool each, routed by prefix affinity: random prompts
    behind a 128-token shared head force evictions. `cache`: `cache.` fields to set."""
    from policies import make_policy
    from sim.cluster import Cluster
    from sim.config import parse_config
    from workloads.registry import make_workload

    raw = {
        "seed": 3,
        "duration_s": duration_s,
        "model": "llama-3-8b",
        "cluster": {"num_nodes": nodes},
        "node": {"num_gpus": 1, "tp": 1, "kv_memory_fraction": 0.12},
        "policies": {"routing": {"name": "prefix_affinity"}},
        "workload": {
            "name": "seed",
            "params": {
                "num_clients": clients,
                "input_min": 256,
                "input_max": 1024,
                "long_share": 0.0,
                "system_prompt_tokens": 128,
                "output_min": 4,
                "output_max": 8,
            },
        },
    }
    cfg = parse_config({**raw, "cache": cache} if cache else raw)
    workload = make_workload("seed", cfg.workload.params, np.random.default_rng(0))
    return Cluster(cfg, workload, np.random.default_rng(1), make_policy)
