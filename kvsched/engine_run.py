"""`python -m kvsched.engine_run --config FILE [--config FILE ...] --out-root DIR`: engine serving runs.

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
import os
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from engine.driver import EngineCluster, WallClockDriver
from engine.graphs import DecodeGraphs
from engine.kv_pool import KVPool
from engine.model import PagedModel
from engine.piecewise import MixedGraphs
from engine.rundir import write_run
from engine.runner import GpuExecutor, StepForward
from engine.shape import ModelShape
from engine.tp import TensorParallelRunner
from engine.warmup import warm_up
from engine.weights import random_weights
from kvsched.engine_cli import add_graphs_option
from kvsched.outdir import PARTIAL_SUFFIX, check_writable, marker_kind
from policies import make_policy
from sim.config import ConfigError, load_config_file, parse_config
from sim.kv.manager import paged_kv_from_config
from sim.latency import make_latency_model
from sim.metrics import Recorder
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


def serve_one(cfg, raw: dict, forward: StepForward, out_dir: Path, tp_runner=None) -> dict:
    model = forward.model
    latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    kv = paged_kv_from_config(cfg, latency, 0, make_policy)
    assert kv.cache.pool.num_pages <= model.pool.num_pages
    scheduler = Scheduler(cfg.node, kv, make_policy("scheduling", cfg.policies.scheduling))
    executor = GpuExecutor(forward, tp_runner)
    workload = make_workload(
        cfg.workload.name, cfg.workload.params, np.random.default_rng([cfg.seed, 0])
    )
    driver = WallClockDriver(
        scheduler,
        executor,
        _sequence_factory(cfg, kv, scheduler.headroom_tokens),
        cfg.duration_s,
        kv.idle_reclaim,
        sampler=(Recorder(cfg), EngineCluster(scheduler, cfg), cfg.sample_interval_s),
    )
    if workload.num_clients is None:
        result = driver.run_open_loop(workload.requests)
    else:
        result = driver.run_closed_loop(workload.requests, workload.num_clients)
    for seq in result.sequences:
        if seq.status in (Status.WAITING, Status.RUNNING):
            seq.status = Status.UNFINISHED
    graphs_mode = "none" if forward.graphs is None else "decode"
    graphs_mode = "all" if forward.mixed is not None else graphs_mode
    info = {"graphs": graphs_mode, "tp": cfg.node.tp}
    return write_run(out_dir, raw, cfg, result, kv, scheduler.num_preemptions, info)


def build_model(cfgs, device: str, rank: int, tp: int) -> tuple[PagedModel, int]:
    """This rank's shard of the weights and of a KV pool as large as sim's pool, plus one
    scratch page (padded graph rows write there); returns (model, sim's page count)."""
    shape = ModelShape.from_model_config(cfgs[0].model)
    page = cfgs[0].cache.page_size
    token_bytes = cfgs[0].model.kv_bytes_per_token
    num_pages = max(c.kv_capacity_bytes // (page * token_bytes) for c in cfgs)
    weights = random_weights(shape, cfgs[0].seed, device, rank=rank, tp=tp)
    kv_heads = shape.shard(tp).num_kv_heads
    pool = KVPool(shape.num_layers, num_pages + 1, kv_heads, page, shape.head_dim, device)
    return PagedModel(shape, weights, pool, tp=tp), num_pages


def capture_graphs(model: PagedModel, mode: str, cfgs, num_pages: int) -> StepForward:
    """CUDA graphs per `--graphs` (none | decode | all); under TP every rank captures the same
    graphs in the same order (their all-reduces pair up across ranks)."""
    graphs, mixed = None, None
    cuda = model.pool.k.device.type == "cuda"  # on CPU the graphs' static buffers run eagerly
    if mode != "none":
        graphs = DecodeGraphs(model, max(c.cache.max_model_len for c in cfgs), num_pages)
        if cuda:
            graphs.capture()
    if mode == "all":
        mixed = MixedGraphs(model, num_pages)
        if cuda:
            mixed.capture()
    return StepForward(model, graphs, mixed)


def _init_tp() -> tuple[int, int]:
    """(rank, world size) under torchrun (one process per GPU, NCCL); (0, 1) otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), world


def _control_group():
    """The group the steps are broadcast over (engine/tp.py): gloo beside NCCL on GPUs, over
    the loopback interface (the ranks share a host; KVSCHED_TP_CONTROL=nccl sends the steps
    over the model's group instead, to compare). None: the model's group."""
    if dist.get_backend() == "gloo" or os.environ.get("KVSCHED_TP_CONTROL") == "nccl":
        return None
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        return dist.new_group(backend="gloo")
    except RuntimeError as err:  # every rank fails alike (same host, same environment)
        print(f"gloo control group unavailable ({err}); steps go over NCCL", flush=True)
        return None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--config", action="append", required=True)
    ap.add_argument("--out-root", required=True)
    ap.add_argument("--warmup-steps", type=int, default=20, help="random steps after the grid")
    ap.add_argument("--no-warmup", action="store_true", help="skip the warm-up (CPU smoke runs)")
    add_graphs_option(ap)
    ap.add_argument("--duration-s", type=float, default=None, help="override duration_s")
    args = ap.parse_args(argv)
    raws = [load_config_file(p) for p in args.config]
    if args.duration_s is not None:  # the run directory's config.json says what ran
        raws = [{**r, "duration_s": args.duration_s} for r in raws]
    cfgs = [parse_config(r, source=p) for r, p in zip(raws, args.config, strict=True)]
    outs = [Path(args.out_root) / Path(p).stem for p in args.config]
    tp = int(os.environ.get("WORLD_SIZE", "1"))
    preflight(cfgs, args.config, outs, tp)  # before the GPU work, not after it
    rank, tp = _init_tp()
    try:
        _serve(args, raws, cfgs, outs, rank, tp)
    except BaseException:
        if tp > 1 and torch.cuda.is_available():
            # Leaving through the NCCL teardown hangs once graphs captured collectives
            # (_exit_tp): say what failed and leave at once; the other rank's timeout ends it.
            traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        raise


def preflight(cfgs, paths: list[str], outs: list[Path], tp: int) -> None:
    """What the engine serves (one paged node, node.tp = the processes), each config's
    workload, and each output directory, checked before any GPU work (ConfigError: exit 2)."""
    if len({c.model.name for c in cfgs}) != 1:
        raise ConfigError("--config: the configs of one engine process must share one model")
    for cfg, path, out in zip(cfgs, paths, outs, strict=True):
        if cfg.cluster.num_nodes != 1 or cfg.cache.mechanism != "paged":
            raise ConfigError(
                f"{path}: the engine serves one node with a paged cache (cluster.num_nodes: 1, "
                f"cache.mechanism: paged), got {cfg.cluster.num_nodes} / {cfg.cache.mechanism}"
            )
        if cfg.node.tp != tp:
            raise ConfigError(f"{path}: node.tp must be the number of processes ({tp})")
        make_workload(cfg.workload.name, cfg.workload.params, np.random.default_rng(0))
        check_writable(out, "run")
        partial = out.with_name(out.name + PARTIAL_SUFFIX)
        if partial.exists() and marker_kind(partial) is None:
            raise ConfigError(f"--out: {partial} exists and was not created by kvsched")


def _serve(args, raws, cfgs, outs: list[Path], rank: int, tp: int) -> None:
    t0 = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, num_pages = build_model(cfgs, device, rank, tp)
    runner = TensorParallelRunner(model, control_group=_control_group()) if tp > 1 else None
    warm = 0.0
    if not args.no_warmup:  # followers run every warm-up step rank 0 sends
        if runner is not None and rank > 0:
            runner.follow()
        else:
            forward_fn = runner.forward if runner else None
            warm = warm_up(model, args.warmup_steps, cfgs[0].seed, forward_fn)
            if runner is not None:
                runner.stop()
    forward = capture_graphs(model, args.graphs, cfgs, num_pages)  # every rank, together
    if runner is not None:
        runner.step_forward = forward
        if rank > 0:  # followers: every serving step comes from rank 0
            runner.follow()
            _exit_tp()
            return
    print(
        f"tp {tp}, graphs {args.graphs}, setup {time.perf_counter() - t0:.1f}s: "
        f"{num_pages} pages ({model.pool.num_bytes / 2**30:.1f} GiB KV per rank), "
        f"warm-up {warm:.1f}s",
        flush=True,
    )
    for raw, cfg, out in zip(raws, cfgs, outs, strict=True):
        summary = serve_one(cfg, raw, forward, out, runner)
        eng = summary["arms"]["engine"]
        print(
            f"{cfg.name}: {eng['completed']} done, {eng['num_steps']} steps, "
            f"ttft p50 {eng['p50_ttft_ms']:.1f} ms, tpot p50 {eng['p50_tpot_ms']:.2f} ms, "
            f"step p50 {eng['p50_step_ms']:.2f} ms, wall {eng['wall_s']:.1f}s "
            f"at {datetime.now(UTC).isoformat(timespec='seconds')}",
            flush=True,
        )
    print(json.dumps({"total_s": round(time.perf_counter() - t0, 1)}), flush=True)
    if runner:
        runner.stop()
        _exit_tp()


def _exit_tp() -> None:
    """End a TP process once its outputs are written. On two H200s, tearing the NCCL group
    down after CUDA graphs had captured its collectives hung every rank (both TP 2 calls of
    2026-11-30 served their runs, then never exited), so the process leaves without it."""
    sys.stdout.flush()
    sys.stderr.flush()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        os._exit(0)
    dist.destroy_process_group()  # gloo on CPU (tests) tears down cleanly


if __name__ == "__main__":
    try:
        main()
    except ConfigError as err:  # as the kvsched CLI does: one line, exit 2
        print(f"error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
