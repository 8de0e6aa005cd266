"""Tensor parallelism on CPU: two gloo ranks, each with its shard of the weights (heads, MLP
columns, vocabulary) and of the KV pool (half the KV heads); rank 0 sends every step to rank 1
(engine.tp) and its logits match the unsharded reference."""

import os

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from engine.batch import SeqWork
from engine.kv_pool import KVPool
from engine.model import PagedModel, greedy
from engine.reference import reference_logits
from engine.shape import TINY
from engine.tp import TensorParallelRunner
from engine.weights import random_weights

TP = 2
TOL = 3e-2


def _rank(rank: int, port: int, result) -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=TP)
    torch.manual_seed(0)
    w = random_weights(TINY, seed=4, device="cpu", rank=rank, tp=TP)
    shard = TINY.shard(TP)
    pool = KVPool(TINY.num_layers, 8, shard.num_kv_heads, 16, TINY.head_dim, "cpu", poison=True)
    control = dist.new_group(backend="gloo")  # the steps travel apart from the model group
    runner = TensorParallelRunner(PagedModel(TINY, w, pool, tp=TP), control_group=control)
    if rank == 1:
        result.put(("followed", runner.follow()))
        dist.destroy_process_group()
        return
    prompt = np.random.default_rng(9).integers(0, TINY.vocab_size, 30)
    pages, rows = [3, 6], []
    for at, n in ((0, 16), (16, 14)):
        rows.append(runner.forward([SeqWork(prompt[at : at + n], at, pages, True)])[0])
    seq = list(prompt) + [int(greedy(rows[-1][None])[0])]
    rows.append(runner.forward([SeqWork(np.array(seq[-1:]), 30, pages, False)])[0])
    runner.stop()
    if rank == 0:
        ref = reference_logits(TINY, random_weights(TINY, seed=4, device="cpu"), torch.tensor(seq))
        errs = [
            float((r.float() - ref[i].float()).norm() / ref[i].float().norm())
            for r, i in zip(rows, (15, 29, 30), strict=True)
        ]
        result.put(("errs", errs))
    dist.destroy_process_group()


def test_tp2_matches_unsharded_reference():
    port = 29500 + os.getpid() % 1000
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, result)) for r in range(TP)]
    for p in procs:
        p.start()
    got = dict(result.get(timeout=120) for _ in range(TP))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert got["followed"] == 3
    assert max(got["errs"]) < TOL, got["errs"]
