"""`python -m engine.serve --config FILE [--config FILE ...] --out-root DIR`: engine serving runs.

Composition (config -> workload -> sim's KV manager and scheduler -> GPU model -> run directory).
This belongs in the application package (kvsched/: `kvsched engine run`); it lives here until
that lands, and is the only engine module that imports workloads/ and policies/ (through sim).

Several configs in one process share the weights, the KV pool tensors and the compiled
kernels (each run gets a fresh scheduler, KV manager and prefix index, so runs are
independent); every config must name the same model.

The scheduler, KV manager, prefix index and policies are the simulator's own objects
(sim.scheduler.Scheduler over sim.kv.manager's paged KV), built from the same config.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from engine.driver import WallClockDriver
from engine.graphs import DecodeGraphs
from engine.kv_pool import KVPool
from engine.model import PagedModel
from engine.rundir import write_run
from engine.runner import GpuExecutor
from engine.shape import ModelShape
from engine.warmup import warm_up
from engine.weights import random_weights
from policies import make_policy
from sim.config import load_config_file, parse_config
from sim.kv.manager import paged_kv_from_config
from sim.latency import make_latency_model
from sim.scheduler import Scheduler
from sim.sequence import Sequence, Status, new_sequence
from workloads.registry import make_workload


def _sequence_factory(cfg, kv, headroom_tokens: int):
    def make(req, arrival_s: float) -> Sequence:
        seq = new_sequence(req, cfg.cache.page_size, cfg.cache.hash_bits, arrival_s)
        if not kv.can_ever_fit(seq, headroom_tokens):  # as sim's cluster: fail it at once
            seq.status, seq.finish_s = Status.FAILED, arrival_s
        return seq

    return make


def serve_one(cfg, raw: dict, model: PagedModel, out_dir: Path, graphs=None) -> dict:
    assert cfg.cluster.num_nodes == 1 and cfg.cache.mechanism == "paged", "one paged node"
    latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    kv = paged_kv_from_config(cfg, latency, 0, make_policy)
    assert kv.cache.pool.num_pages <= model.pool.num_pages
    scheduler = Scheduler(cfg.node, kv)
    executor = GpuExecutor(model, graphs)
    workload = make_workload(
        cfg.workload.name, cfg.workload.params, np.random.default_rng([cfg.seed, 0])
    )
    driver = WallClockDriver(
        scheduler,
        executor,
        _sequence_factory(cfg, kv, scheduler.headroom_tokens),
        cfg.duration_s,
        kv.idle_reclaim,
    )
    if workload.num_clients is None:
        result = driver.run_open_loop(workload.requests)
    else:
        result = driver.run_closed_loop(workload.requests, workload.num_clients)
    for seq in result.sequences:
        if seq.status in (Status.WAITING, Status.RUNNING):
            seq.status = Status.UNFINISHED
    return write_run(out_dir, raw, cfg, result, kv, scheduler.num_preemptions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", action="append", required=True)
    ap.add_argument("--out-root", required=True)
    ap.add_argument("--warmup-steps", type=int, default=20, help="random steps after the grid")
    ap.add_argument("--no-warmup", action="store_true", help="skip the warm-up (CPU smoke runs)")
    ap.add_argument("--graphs", action="store_true", help="CUDA graphs for decode-only steps")
    args = ap.parse_args()
    raws = [load_config_file(p) for p in args.config]
    cfgs = [parse_config(r, source=p) for r, p in zip(raws, args.config, strict=True)]
    assert len({c.model.name for c in cfgs}) == 1, "one model per process"
    t0 = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = ModelShape.from_model_config(cfgs[0].model)
    page = cfgs[0].cache.page_size
    token_bytes = cfgs[0].model.kv_bytes_per_token
    num_pages = max(c.kv_capacity_bytes // (page * token_bytes) for c in cfgs)
    weights = random_weights(shape, cfgs[0].seed, device)
    # One page past sim's pool: the scratch page padded graph rows write to.
    pool = KVPool(shape.num_layers, num_pages + 1, shape.num_kv_heads, page, shape.head_dim, device)
    model = PagedModel(shape, weights, pool)
    warm = 0.0 if args.no_warmup else warm_up(model, args.warmup_steps, seed=cfgs[0].seed)
    graphs = None
    if args.graphs:
        graphs = DecodeGraphs(model, max(c.cache.max_model_len for c in cfgs), num_pages)
        graphs.capture()
    print(
        f"graphs {args.graphs}, setup {time.perf_counter() - t0:.1f}s: {num_pages} pages "
        f"({pool.num_bytes / 2**30:.1f} GiB KV), warm-up {warm:.1f}s",
        flush=True,
    )
    for raw, cfg, path in zip(raws, cfgs, args.config, strict=True):
        out = Path(args.out_root) / Path(path).stem
        summary = serve_one(cfg, raw, model, out, graphs)
        eng = summary["arms"]["engine"]
        print(
            f"{cfg.name}: {eng['completed']} done, {eng['num_steps']} steps, "
            f"ttft p50 {eng['p50_ttft_ms']:.1f} ms, tpot p50 {eng['p50_tpot_ms']:.2f} ms, "
            f"step p50 {eng['p50_step_ms']:.2f} ms, wall {eng['wall_s']:.1f}s "
            f"at {datetime.now(UTC).isoformat(timespec='seconds')}",
            flush=True,
        )
    print(json.dumps({"total_s": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
