"""Warm-up before a timed run: compile every Triton specialisation and let cuBLAS pick kernels.

Random mixed steps (decode batches 1-256 over contexts 1-32K, prefill chunks with and without
context) on random page ids. Whatever they write is garbage, but the engine never reads a slot
before writing it in the same run (sim's cache hands out a page before anything is written).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from engine.batch import SeqWork
from engine.model import PagedModel

MAX_CTX = 32768
TOKEN_BUDGET = 8192


def _work(rng, num_pages: int, page: int, context: int, n: int, prefill: bool, vocab: int):
    pages = rng.integers(0, num_pages, -(-(context + n) // page)).tolist()
    return SeqWork(rng.integers(0, vocab, n), context, pages, prefill)


def random_step(rng: np.random.Generator, model: PagedModel) -> list[SeqWork]:
    pool, vocab = model.pool, model.shape.vocab_size
    args = (pool.num_pages, pool.page_size)
    works, budget = [], TOKEN_BUDGET
    for _ in range(int(rng.choice([0, 1, 3, 16, 64, 255]))):
        ctx = int(np.exp(rng.uniform(0, np.log(MAX_CTX))))
        works.append(_work(rng, *args, ctx, 1, False, vocab))
        budget -= 1
    for _ in range(int(rng.integers(0, 3))):
        n = min(budget, int(np.exp(rng.uniform(0, np.log(TOKEN_BUDGET)))))
        ctx = 0 if rng.random() < 0.5 else int(np.exp(rng.uniform(0, np.log(MAX_CTX // 2))))
        if n > 0:
            works.append(_work(rng, *args, ctx, n, True, vocab))
            budget -= n
    return works or [_work(rng, *args, 0, 1, True, vocab)]


def warm_up(model: PagedModel, num_steps: int, seed: int = 0) -> float:
    """Run num_steps random steps; returns the seconds it took."""
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 7])
    for _ in range(num_steps):
        model.forward(model.prepare(random_step(rng, model))).argmax(-1).tolist()
    if model.pool.k.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0
