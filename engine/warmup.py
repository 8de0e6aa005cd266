"""Warm-up before a timed run: compile every Triton specialisation and let cuBLAS pick kernels.

Triton compiles a kernel again for each new combination of constexprs (the prefill tile height
follows the longest chunk, the combine pass's width the split count) and of integer arguments
that are 1 or a multiple of 16. A first run with only random warm-up steps hit 1-2 s compile
stalls mid-run (engine/runs/README.md), so the warm-up walks a grid that reaches each variant
(chunks of 1-8192 tokens over contexts 0-20K, single decodes whose context gives 1-20 splits,
batches of 1-255), then random mixed steps, all on random page ids. Whatever they write is garbage, but the engine never reads a slot
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


CHUNKS = (1, 3, 6, 12, 16, 17, 100, 128, 1000, 4096, 8192)
CONTEXTS = (0, 15, 16, 1000, 5000, 20000)
DECODE_CONTEXTS = (0, 31, 32, 600, 1500, 3000, 6000, 10000, 33000)


def grid_steps(rng: np.random.Generator, model: PagedModel) -> list[list[SeqWork]]:
    pool, vocab = model.pool, model.shape.vocab_size
    args = (pool.num_pages, pool.page_size)
    steps = [[_work(rng, *args, c, n, True, vocab)] for n in CHUNKS for c in CONTEXTS]
    steps += [[_work(rng, *args, c, 1, False, vocab)] for c in DECODE_CONTEXTS]
    steps += [[_work(rng, *args, 500, 1, False, vocab)] * b for b in (3, 16, 64, 255)]
    return steps


def warm_up(model: PagedModel, num_random: int, seed: int = 0, forward=None) -> float:
    """Run the grid, then num_random random steps; returns the seconds it took. `forward`
    (works -> logits) replaces the local forward (a TP group's rank 0 sends each step)."""
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 7])
    steps = grid_steps(rng, model) + [random_step(rng, model) for _ in range(num_random)]
    forward = forward or (lambda works: model.forward(model.prepare(works)))
    for works in steps:
        forward(works).argmax(-1).tolist()
    if model.pool.k.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0
