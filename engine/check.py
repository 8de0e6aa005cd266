"""GPU logits check: the paged engine against the plain-torch reference at a real model shape.

    python -m engine.check [--shape llama-3-8b] [--json FILE]

Scenarios (as tests/engine, at serving sizes): a prompt prefilled in chunks then decoded, a
prefix hit on pages another request wrote (vs the same request computed from scratch), a mixed
batch of decodes and prefill chunks, and the Triton prefill kernel against the torch path.
Reports per-row relative L2 error of the logits and whether the greedy token agrees.
"""

from __future__ import annotations

import argparse
import json
import time
from types import SimpleNamespace

import numpy as np
import torch

from engine import attention
from engine.batch import SeqWork
from engine.kv_pool import KVPool
from engine.model import PagedModel, greedy
from engine.reference import reference_logits
from engine.shape import LLAMA_3_8B, TINY
from engine.weights import random_weights
from kernels.shapes import MODEL_SHAPES

SHAPES = {"llama-3-8b": LLAMA_3_8B, "tiny": TINY}
PAGE = 16


class Pages:
    """Page ids in a shuffled order, as a long-running pool hands them out."""

    def __init__(self, num_pages: int, seed: int):
        self.free = np.random.default_rng(seed).permutation(num_pages).tolist()

    def take(self, num_tokens: int) -> list[int]:
        n = -(-num_tokens // PAGE)
        out, self.free = self.free[:n], self.free[n:]
        return out


def prefill(model, prompt, pages, chunks, context=0) -> torch.Tensor:
    at = context
    for n in chunks:
        logits = model.forward(model.prepare([SeqWork(prompt[at : at + n], at, pages, True)]))
        at += n
    return logits[0]


def compare(rows: torch.Tensor, ref: torch.Tensor) -> dict:
    err = (rows.float() - ref.float()).norm(dim=-1) / ref.float().norm(dim=-1)
    agree = (rows.argmax(-1) == ref.argmax(-1)).float().mean()
    return {"rows": len(rows), "max_rel_err": float(err.max()), "argmax_agree": float(agree)}


def chunked_then_decode(model, w, pages, rng, prompt_len, chunks, num_decode) -> dict:
    prompt = rng.integers(0, model.shape.vocab_size, prompt_len)
    table = pages.take(prompt_len + num_decode)
    rows = [prefill(model, prompt, table, chunks)]
    seq = list(prompt)
    for _ in range(num_decode):
        seq.append(int(greedy(rows[-1][None])[0]))
        rows.append(
            model.forward(model.prepare([SeqWork(np.array(seq[-1:]), len(seq) - 1, table, False)]))[
                0
            ]
        )
    ref = reference_logits(model.shape, w, torch.tensor(seq, device=w.embed.device))
    return compare(torch.stack(rows), ref[prompt_len - 1 :])


def prefix_hit(model, w, pages, rng, a_len, shared, b_new) -> dict:
    v = model.shape.vocab_size
    a = rng.integers(0, v, a_len)
    b = np.concatenate([a[:shared], rng.integers(0, v, b_new)])
    a_pages = pages.take(a_len)
    prefill(model, a, a_pages, [a_len])
    b_pages = a_pages[: shared // PAGE] + pages.take(b_new)
    hit = prefill(model, b, b_pages, [b_new], context=shared)
    scratch = prefill(model, b, pages.take(len(b)), [len(b)])
    ref = reference_logits(model.shape, w, torch.tensor(b, device=w.embed.device))[-1]
    return {
        "hit_vs_scratch": compare(hit[None], scratch[None]),
        "hit_vs_ref": compare(hit[None], ref[None]),
    }


def mixed(model, w, pages, rng, decode_ctx, chunk_specs) -> dict:
    """Decodes at contexts decode_ctx, and chunks (context, new) in one step."""
    v, works, prompts = model.shape.vocab_size, [], []
    for ctx in decode_ctx:
        p = rng.integers(0, v, ctx + 1)
        table = pages.take(ctx + 1)
        prefill(model, p[:-1], table, [ctx])
        works.append(SeqWork(p[-1:], ctx, table, False))
        prompts.append(p)
    for ctx, new in chunk_specs:
        p = rng.integers(0, v, ctx + new)
        table = pages.take(ctx + new)
        if ctx:
            prefill(model, p[:ctx], table, [ctx])
        works.append(SeqWork(p[ctx:], ctx, table, True))
        prompts.append(p)
    order = rng.permutation(len(works))
    logits = model.forward(model.prepare([works[i] for i in order]))
    dev = w.embed.device
    ref = torch.stack(
        [reference_logits(model.shape, w, torch.tensor(prompts[i], device=dev))[-1] for i in order]
    )
    return compare(logits, ref)


def _median_s(fn, reps: int = 15) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def decode_graph_bench(shape, w, device, batches=(1, 16, 64, 256), ctx=2048) -> dict:
    """Decode-only step wall time (host to sampled tokens), eager vs CUDA graph, and their logits."""
    from engine.graphs import DecodeGraphs
    from kernels.paged_decode import decode_splits

    num_pages = 4096
    pool = KVPool(shape.num_layers, num_pages + 1, shape.num_kv_heads, PAGE, shape.head_dim, device)
    pool.k.normal_(), pool.v.normal_()
    model = PagedModel(shape, w, pool)
    graphs = DecodeGraphs(model, max_model_len=40960, scratch_page=num_pages)
    t = time.perf_counter()
    hkv = shape.num_kv_heads
    caps = {graphs.cap_for(decode_splits(b, b * ctx, ctx, hkv, device)[0]) for b in batches}
    graphs.capture(batches, caps=sorted(caps))
    out = {"capture_s": round(time.perf_counter() - t, 2), "ctx": ctx}
    rng = np.random.default_rng(1)
    for b in batches:
        works = [
            SeqWork(rng.integers(0, shape.vocab_size, 1), ctx - 1,
                    rng.integers(0, num_pages, ctx // PAGE).tolist(), False)
            for _ in range(b)
        ]  # fmt: skip
        eager = model.forward(model.prepare(works))
        graph = graphs.run(works).clone()
        err = float((graph.float() - eager.float()).norm() / eager.float().norm())
        t_eager = _median_s(lambda: greedy(model.forward(model.prepare(works))).tolist())  # noqa: B023
        t_graph = _median_s(lambda: greedy(graphs.run(works)).tolist())  # noqa: B023
        out[f"b{b}"] = {"eager_ms": t_eager * 1e3, "graph_ms": t_graph * 1e3, "rel_err": err}
    return out


def mixed_graph_bench(shape, w, device, ctx=2048) -> dict:
    """Steps with a prefill chunk: eager vs piecewise graphs (engine/piecewise.py), host wall
    time per step (median of 15) and the logits' relative error between the two."""
    from engine.piecewise import MixedGraphs

    num_pages = 8192
    pool = KVPool(shape.num_layers, num_pages + 1, shape.num_kv_heads, PAGE, shape.head_dim, device)
    pool.k.normal_(), pool.v.normal_()
    model = PagedModel(shape, w, pool)
    mixed_graphs = MixedGraphs(model, scratch_page=num_pages, buckets=(64, 256, 512))
    t = time.perf_counter()
    mixed_graphs.capture()
    out: dict = {"capture_s": round(time.perf_counter() - t, 2), "ctx": ctx}
    rng = np.random.default_rng(2)

    def work(n: int, context: int, prefill: bool) -> SeqWork:
        pages = rng.integers(0, num_pages, -(-(context + n) // PAGE)).tolist()
        return SeqWork(rng.integers(0, shape.vocab_size, n), context, pages, prefill)

    cases = {"1x50_chunk": [work(50, 0, True)], "16dec+200_chunk": [work(1, ctx - 1, False)] * 16}
    cases["16dec+200_chunk"] = cases["16dec+200_chunk"] + [work(200, 1000, True)]
    cases["64dec+400_chunk"] = [work(1, ctx - 1, False) for _ in range(64)] + [work(400, 0, True)]
    for name, works in cases.items():
        step = model.prepare(works)
        eager = model.forward(step)
        graph = mixed_graphs.run(step).clone()
        err = float((graph.float() - eager.float()).norm() / eager.float().norm())
        t_eager = _median_s(lambda: greedy(model.forward(model.prepare(works))).tolist())  # noqa: B023
        t_graph = _median_s(lambda: greedy(mixed_graphs.run(model.prepare(works))).tolist())  # noqa: B023
        out[name] = {"eager_ms": t_eager * 1e3, "piecewise_ms": t_graph * 1e3, "rel_err": err}
    return out


def _event_median_ms(call, reps: int) -> float:
    """GPU ms of one `call` (CUDA events around it, median of `reps`, after 3 warm-up calls)."""
    for _ in range(3):
        call()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(np.median(times))


def _step_ms(call, device: str) -> float:
    """GPU ms of a step (`_event_median_ms`, 10 calls); on CPU (tests) one call's wall ms."""
    if device == "cuda":
        return _event_median_ms(call, 10)
    return _median_s(call, reps=1) * 1e3


def decode_conditions(shape, device, batch=25, ctx=12288, pool_pages=49490) -> dict:
    """One layer's paged decode attention (kernels.paged_decode) as the serving engine runs it,
    against the conditions the calibration measured it in: ms per call (CUDA events, median of
    30) with the split of the kernel's heuristic chosen on the host vs read from device memory
    under a decode graph's split cap (engine/graphs.py), and for pages spread at random over a
    serving-size pool vs consecutive pages."""
    from engine.graphs import split_caps
    from kernels.paged_decode import decode_split_bound, decode_splits, paged_decode_attention

    hkv, d = shape.num_kv_heads, shape.head_dim
    k = torch.randn(pool_pages, hkv, PAGE, d, device=device, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    q = torch.randn(batch, shape.num_q_heads, d, device=device, dtype=torch.bfloat16)
    per_seq = ctx // PAGE
    rng = np.random.default_rng(3)
    tables = {
        "random": rng.permutation(pool_pages)[: batch * per_seq].reshape(batch, per_seq),
        "consecutive": np.arange(batch * per_seq).reshape(batch, per_seq),
    }
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=device)
    num_splits, per_split = decode_splits(batch, batch * ctx, ctx, hkv, device)
    caps = split_caps(decode_split_bound(1, 40960, hkv, device))
    split_tensor = torch.tensor([num_splits, per_split], dtype=torch.int32, device=device)
    splits = {
        "heuristic": dict(max_seq_len=ctx, total_tokens=batch * ctx),
        "graph_split_tensor": dict(
            split_tensor=split_tensor, max_splits=next(c for c in caps if c >= num_splits)
        ),
    }
    out: dict = {"batch": batch, "ctx": ctx, "pool_pages": pool_pages, "num_splits": num_splits}
    for tname, table in tables.items():
        t = torch.from_numpy(table.astype(np.int32)).to(device)
        for sname, kw in splits.items():

            def call(t=t, kw=kw):
                paged_decode_attention(q, k, v, t, lens, check_bounds=False, **kw)

            out[f"{tname}/{sname}_ms"] = _event_median_ms(call, 30)
    kv_bytes = 2 * batch * ctx * hkv * d * 2
    out["copy_floor_ms"] = kv_bytes / 4.8e12 * 1e3
    return out


def shared_layouts(prefix: int, pool_pages: int, batches, tails):
    """The block tables decode_shared_pages times, in its order (numpy only, seeded: the fit of
    sim/latency/shared_reads.py regenerates them): per batch size that the pool holds with
    distinct pages, and per group count G (B itself first: every sequence on its own pages),
    (batch, G, context lengths, block table, each sequence's group)."""
    rng = np.random.default_rng(4)
    for batch in batches:
        if batch * (prefix + tails[1]) > (pool_pages - 1) * PAGE:
            continue  # the distinct-pages reference would not fit the pool
        lens = prefix + rng.integers(tails[0], tails[1] + 1, batch)
        width = -(-int(lens.max()) // PAGE)
        for groups in sorted({batch, 40, 16, 4, 1}, reverse=True):
            if groups > batch:
                continue
            free = iter(rng.permutation(pool_pages).tolist())
            heads = [[next(free) for _ in range(prefix // PAGE)] for _ in range(groups)]
            member = (
                np.arange(batch) % groups if groups == batch else rng.integers(0, groups, batch)
            )
            table = np.zeros((batch, width), dtype=np.int32)
            for i in range(batch):
                own = [next(free) for _ in range(-(-int(lens[i]) // PAGE) - prefix // PAGE)]
                row = heads[member[i]] + own
                table[i, : len(row)] = row
            yield batch, groups, lens, table, member


def sharing(prefix: int, lens: np.ndarray, member: np.ndarray) -> dict:
    """The batch's KV tokens, the share of them a sequence reads that another one reads too,
    and the share of the sharing sequences' contexts that is the shared prefix."""
    sizes = np.bincount(member)
    sharing_seqs = sizes[member] >= 2
    total = int(lens.sum())
    return {
        "kv_tokens": total,
        "duplicate_share": (len(member) - int((sizes > 0).sum())) * prefix / total,
        "prefix_share": (
            int(sharing_seqs.sum()) * prefix / int(lens[sharing_seqs].sum())
            if sharing_seqs.any()
            else 0.0
        ),
    }


def decode_shared_pages(
    shape, device, prefix=2048, pool_pages=49490, batches=(16, 32, 64), tails=(128, 384)
) -> dict:
    """One layer's paged decode attention (kernels.paged_decode) when decodes share their
    leading pages, as after prefix hits: B sequences drawn at random from G groups, each group's
    sequences on the same `prefix` tokens of pages, every tail (`tails`: tokens drawn from that
    range, both ends included) on its own pages (`shared_layouts`). ms per call, timed as the
    calibration times the decode table (kernels.bench.bench_ms: CUDA-graph replay, L2 flushed
    before each, median; eager calls would time the host's launch path on small batches), split
    chosen by the kernel's heuristic, against the same lengths on distinct pages (G = B), with
    the batch's `sharing`. The decode table is measured on distinct pages; a shared page read
    again by another program of the same launch may come from L2."""
    k, v = _kv_pool(shape, pool_pages, device)
    out: dict = {"prefix": prefix, "pool_pages": pool_pages, "tails": list(tails)}
    for batch, groups, lens, table, member in shared_layouts(prefix, pool_pages, batches, tails):
        if groups == batch:  # a new batch: its queries
            q = _queries(shape, batch, device)
        ms = _decode_layer_ms(q, k, v, table, lens)
        out[f"b{batch}_g{groups}"] = {"ms": ms, **sharing(prefix, lens, member)}
    return out


def _kv_pool(shape, pool_pages: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's K and V pools of random bf16 pages."""
    k = torch.randn(
        pool_pages, shape.num_kv_heads, PAGE, shape.head_dim, device=device, dtype=torch.bfloat16
    )
    return k, torch.randn_like(k)


def _queries(shape, batch: int, device) -> torch.Tensor:
    return torch.randn(
        batch, shape.num_q_heads, shape.head_dim, device=device, dtype=torch.bfloat16
    )


def _decode_layer_ms(q, k, v, table: np.ndarray, lens: np.ndarray) -> float:
    """ms of one paged decode call over these block tables and lengths, timed as the calibration
    times the decode table (kernels.bench.bench_ms; on CPU, in tests: one call's wall time)."""
    from kernels.bench import bench_ms
    from kernels.paged_decode import paged_decode_attention

    t = torch.from_numpy(table).to(q.device)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=q.device)
    kw = dict(max_seq_len=int(lens.max()), total_tokens=int(lens.sum()))
    return bench_ms(lambda: paged_decode_attention(q, k, v, t, seq_lens, check_bounds=False, **kw))


def _prefill_layer_ms(shape, k, v, chunks: list[tuple[int, int]], rng) -> float:
    """ms of one paged prefill launch (kernels.paged_prefill, planned as the engine plans a
    step's chunks: plan_prefill's defaults) over `chunks` ((new tokens, cached context) per
    request, each on random pool pages), timed as the calibration times its prefill table
    (kernels.bench.bench_ms)."""
    from kernels.bench import bench_ms
    from kernels.paged_prefill import paged_prefill_attention, plan_prefill

    new = [n for n, _ in chunks]
    lens = [n + c for n, c in chunks]
    table = _table(distinct_rows(np.array(lens)), rng.permutation(k.shape[0]))
    dev = k.device
    group = shape.num_q_heads // shape.num_kv_heads
    plan = plan_prefill(new, lens, shape.num_kv_heads, group, device=dev)
    q = torch.randn(sum(new), shape.num_q_heads, shape.head_dim, device=dev, dtype=k.dtype)
    args = (
        q,
        k,
        v,
        torch.from_numpy(table).to(dev),
        torch.tensor(lens, dtype=torch.int32, device=dev),
        torch.tensor(np.cumsum([0, *new]), dtype=torch.int32, device=dev),
    )
    out = torch.empty_like(q)
    paged_prefill_attention(*args, out=out, plan=plan)  # validates once
    return bench_ms(lambda: paged_prefill_attention(*args, out=out, plan=plan, check_bounds=False))


def prefill_batches(shape, device, steps: list[list[list[int]]], pool_pages=49490) -> list[dict]:
    """One layer's paged prefill attention for a step's chunks in one launch (as the engine runs
    them) and each chunk alone (as the calibration's prefill table is measured and the
    simulator prices a step: the sum over its chunks). `steps`: per step, [new, context] per
    chunk. ms per call."""
    k, v = _kv_pool(shape, pool_pages, device)
    rng = np.random.default_rng(9)
    alone: dict[tuple[int, int], float] = {}
    out = []
    for step in steps:
        chunks = [(int(n), int(c)) for n, c in step]
        batched = _prefill_layer_ms(shape, k, v, chunks, rng)
        for chunk in chunks:
            if chunk not in alone:
                alone[chunk] = _prefill_layer_ms(shape, k, v, [chunk], rng)
        out.append({"chunks": [list(c) for c in chunks], "batched_ms": batched,
                    "alone_ms": [alone[c] for c in chunks]})  # fmt: skip
    return out


def ragged_lengths(rng, batch: int, mean: int, sigma: float) -> np.ndarray:
    """`batch` context lengths of about `mean` tokens on average, lognormal with `sigma` (0:
    all equal), clipped to 16-65,536 tokens."""
    if sigma == 0:
        return np.full(batch, mean, dtype=np.int64)
    w = rng.lognormal(0.0, sigma, batch)
    return np.clip(np.round(mean * w / w.mean()), 16, 65536).astype(np.int64)


def decode_ragged(shape, device, batches=(8, 16, 25, 32, 64), means=(2048, 8192),
                  sigmas=(0.0, 0.35, 0.7, 1.0, 1.4), pool_pages=49490) -> dict:  # fmt: skip
    """One layer's paged decode attention on distinct random pages (timed as decode_shared_pages
    times it) for batches of unequal lengths: the calibration's decode table is measured on
    equal lengths and priced at the batch's mean, while a serving batch is ragged (a long
    context beside short ones). ms per call with its lengths' max / mean."""
    k, v = _kv_pool(shape, pool_pages, device)
    rng = np.random.default_rng(6)
    out: dict = {"pool_pages": pool_pages}
    for batch in batches:
        q = _queries(shape, batch, device)
        for mean in means:
            for sigma in sigmas:
                lens = ragged_lengths(rng, batch, mean, sigma)
                pages = -(-lens // PAGE)
                if int(pages.sum()) > pool_pages:
                    continue
                perm = rng.permutation(pool_pages)[: int(pages.sum())]
                table = np.zeros((batch, int(pages.max())), dtype=np.int32)
                for i, row in enumerate(np.split(perm, np.cumsum(pages)[:-1])):
                    table[i, : len(row)] = row
                out[f"b{batch}_m{mean}_s{sigma}"] = {
                    "ms": _decode_layer_ms(q, k, v, table, lens),
                    "kv_tokens": int(lens.sum()),
                    "max_len": int(lens.max()),
                    "max_over_mean": float(lens.max() / lens.mean()),
                }
    return out


def _decode_graphs(shape, w, device, pool_pages: int, batches: list[np.ndarray]):
    """The engine's decode graphs over a random pool of `pool_pages` pages (plus the scratch
    page), captured for the padded sizes and split caps these batches' lengths need (on CPU,
    in tests, not captured: the steps run eagerly on the same inputs)."""
    from engine.graphs import DecodeGraphs
    from kernels.paged_decode import decode_splits

    pool = KVPool(
        shape.num_layers, pool_pages + 1, shape.num_kv_heads, PAGE, shape.head_dim, device
    )
    pool.k.normal_(), pool.v.normal_()
    graphs = DecodeGraphs(PagedModel(shape, w, pool), max_model_len=40960, scratch_page=pool_pages)
    hkv = shape.num_kv_heads
    caps = {
        graphs.cap_for(decode_splits(len(n), int(n.sum()), int(n.max()), hkv, device)[0])
        for n in batches
    }
    sizes = {graphs.size_for(len(n)) for n in batches}  # the batch each step pads to
    if device == "cuda":
        graphs.capture(sorted(s for s in sizes if s is not None), caps=sorted(caps))
    return graphs


def _decode_works(shape, rng, table: np.ndarray, lens: np.ndarray) -> list[SeqWork]:
    """One decode per row: a random token at its context's end, over its own block table."""
    return [
        SeqWork(rng.integers(0, shape.vocab_size, 1), int(n) - 1,
                table[i, : -(-int(n) // PAGE)].tolist(), False)
        for i, n in enumerate(lens)
    ]  # fmt: skip


def decode_step_shared(
    shape, w, device, prefix=2048, batches=(16, 32, 64), tails=(128, 384), pool_pages=20480
) -> dict:
    """Whole decode steps of the engine (every layer, CUDA graph as served, host to sampled
    tokens, median of 15) on the block tables decode_shared_pages times one layer of
    (`shared_layouts`): do the shared pages' savings the kernel shows reach a served step?"""
    layouts = list(shared_layouts(prefix, pool_pages, batches, tails))
    graphs = _decode_graphs(shape, w, device, pool_pages, [lens for _, _, lens, _, _ in layouts])
    rng = np.random.default_rng(5)
    out: dict = {"prefix": prefix, "pool_pages": pool_pages, "tails": list(tails)}
    for batch, groups, lens, table, member in layouts:
        works = _decode_works(shape, rng, table, lens)
        ms = _median_s(lambda: greedy(graphs.run(works)).tolist()) * 1e3  # noqa: B023
        out[f"b{batch}_g{groups}"] = {"ms": ms, **sharing(prefix, lens, member)}
    return out


def distinct_rows(lens: np.ndarray) -> list[list[int]]:
    """Page indices of requests of these lengths (tokens), each on pages of its own, in order."""
    pages = -(-np.asarray(lens, dtype=np.int64) // PAGE)
    return [r.tolist() for r in np.split(np.arange(int(pages.sum())), np.cumsum(pages)[:-1])]


def _table(rows: list[list[int]], pages: np.ndarray) -> np.ndarray:
    """Block tables of page indices `rows` (padded with page 0) mapped through `pages`."""
    table = np.zeros((len(rows), max(map(len, rows))), dtype=np.int32)
    for i, row in enumerate(rows):
        table[i, : len(row)] = pages[row]
    return table


def as_runs(row: list[int]) -> list[list[int]]:
    """[first, count] runs of consecutive page indices."""
    runs: list[list[int]] = []
    for p in row:
        if runs and runs[-1][0] + runs[-1][1] == p:
            runs[-1][1] += 1
        else:
            runs.append([p, 1])
    return runs


def step_layout(
    decodes: list[tuple[list[int], int]], page_size: int, real_ids: bool = False
) -> dict:
    """One served step's decodes ((pages, context)) with their pages renumbered in first-seen
    order, so pages the step's decodes share keep one index; `served_rows` reads it back. With
    `real_ids`, also the pool's own page ids (`ids`: where in the pool the engine read them)."""
    ids: dict[int, int] = {}
    lens, tables, real = [], [], []
    for pages, ctx in decodes:
        own = pages[: -(-ctx // page_size)]
        lens.append(ctx)
        tables.append(as_runs([ids.setdefault(p, len(ids)) for p in own]))
        real.append(as_runs(list(own)))
    layout = {"lens": lens, "runs": tables, "pages": len(ids)}
    return {**layout, "ids": real} if real_ids else layout


def served_rows(step: dict, key: str = "runs") -> list[list[int]]:
    """A served step's block tables (engine/runs/served_layouts.py: page indices in first-seen
    order, or with key "ids" the pool's own page ids, stored as [first, count] runs)."""
    return [[p for first, n in runs for p in range(first, first + n)] for runs in step[key]]


def _served_variants(step: dict, rng, pool_pages: int):
    """(name, block tables, lengths) of a served step: its own tables, the same lengths on
    distinct pages, equal lengths at the mean on distinct pages; each on a shuffled pool."""
    lens = np.array(step["lens"], dtype=np.int64)
    mean = np.full(len(lens), int(round(lens.mean())))
    for name, rows, at in (
        ("served", served_rows(step), lens),
        ("distinct", distinct_rows(lens), lens),
        ("equal", distinct_rows(mean), mean),
    ):
        yield name, _table(rows, rng.permutation(pool_pages)), at
    if "ids" in step:  # the pages where the engine's pool had them (no shuffle)
        yield "served_ids", _table(served_rows(step, "ids"), np.arange(pool_pages)), lens


def decode_served(shape, device, steps: list[dict], pool_pages=49490) -> list[dict]:
    """One layer's paged decode attention (timed as decode_shared_pages times it) on decode
    batches a serving run ran: their own block tables (pages another decode of the step reads
    included), the same lengths on distinct pages, and equal lengths at their mean on distinct
    pages (what the calibration's decode table prices). Each on pages a shuffled pool hands
    out; a layout with the pool's own page ids also on those (`served_ids`)."""
    k, v = _kv_pool(shape, pool_pages, device)
    rng = np.random.default_rng(7)
    out = []
    for step in steps:
        q = _queries(shape, len(step["lens"]), device)
        out.append({
            f"{name}_ms": _decode_layer_ms(q, k, v, table, lens)
            for name, table, lens in _served_variants(step, rng, pool_pages)
        })  # fmt: skip
    return out


def decode_step_served(shape, w, device, steps: list[dict], pool_pages=20480) -> list[dict]:
    """Whole decode steps of the engine (every layer, CUDA graph as served; GPU ms between
    events around the step, median of 10) on the served batches `decode_served` times one
    layer of: do the savings the kernel shows on them reach the served step?"""
    rng = np.random.default_rng(8)
    cases = [list(_served_variants(step, rng, pool_pages)) for step in steps]
    graphs = _decode_graphs(shape, w, device, pool_pages, [n for c in cases for _, _, n in c])
    out = []
    for case in cases:
        row = {}
        for name, table, lens in case:
            works = _decode_works(shape, rng, table, lens)
            row[f"{name}_ms"] = _step_ms(lambda: graphs.run(works), device)  # noqa: B023
        out.append(row)
    return out


PARTS = (
    "decode_shared_pages",
    "decode_step_shared",
    "decode_ragged",
    "decode_served",
    "decode_step_served",
    "prefill_batches",
)
SHARED_PREFIXES = (512, 1024, 2048, 4096, 8192)
SHARED_BATCHES = (8, 16, 32, 64, 128, 256)
# The attention shards the serving runs use: llama-3-8b on one GPU, the article's model at TP 2
# (each GPU holds half of the query and KV heads).
SHARED_SHARDS = {"llama-3-8b": ("llama-3-8b", 1), "article-70b-tp2": ("article-70b", 2)}


def attention_shard(model: str, tp: int) -> SimpleNamespace:
    """The heads one GPU of a `tp`-way group attends with (what the decode kernel sees)."""
    m = MODEL_SHAPES[model]
    return SimpleNamespace(
        num_q_heads=m["num_q_heads"] // tp,
        num_kv_heads=m["num_kv_heads"] // tp,
        head_dim=m["head_dim"],
    )


def run(shape_name: str, device: str, seed: int = 0) -> dict:
    shape = SHAPES[shape_name]
    t0 = time.perf_counter()
    w = random_weights(shape, seed, device)
    pool = KVPool(
        shape.num_layers, 4096, shape.num_kv_heads, PAGE, shape.head_dim, device, poison=True
    )
    model = PagedModel(shape, w, pool)
    if device == "cuda":
        torch.cuda.synchronize()
    out = {
        "shape": shape_name,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "prefill_backend": attention.PREFILL_BACKEND,
        "setup_s": round(time.perf_counter() - t0, 2),
    }
    rng, pages = np.random.default_rng(seed), Pages(4096, seed)
    big = shape_name != "tiny"
    out["chunked_then_decode"] = chunked_then_decode(
        model, w, pages, rng, 1500 if big else 40, [512, 512, 476] if big else [16, 13, 11], 8
    )
    out["prefix_hit"] = prefix_hit(
        model, w, pages, rng, *((2000, 1024, 700) if big else (48, 32, 21))
    )
    out["mixed"] = mixed(
        model,
        w,
        pages,
        rng,
        [300, 777, 1500, 2500] if big else [5, 20],
        [(1024, 600), (0, 800)] if big else [(17, 23), (0, 9)],
    )
    model_torch = PagedModel(shape, w, pool)
    import engine.model as m

    kernel = m.prepare_prefill
    # The torch path takes only the arguments the model passes, not the kernel's tuning ones, so
    # the swap is not type-compatible: it is a test double, set by name.
    setattr(m, "prepare_prefill", attention.prepare_prefill_torch)  # noqa: B010
    try:
        out["torch_prefill_path"] = chunked_then_decode(
            model_torch,
            w,
            pages,
            np.random.default_rng(seed),
            1500 if big else 40,
            [512, 512, 476] if big else [16, 13, 11],
            2,
        )
    finally:
        m.prepare_prefill = kernel
    if device == "cuda":
        del model, model_torch, pool
        out["decode_graphs"] = decode_graph_bench(shape, w, device)
        torch.cuda.empty_cache()
        out["mixed_graphs"] = mixed_graph_bench(shape, w, device)
        torch.cuda.empty_cache()
        for b, c in ((25, 12288), (32, 2048), (8, 1024)):
            out[f"decode_conditions_b{b}_c{c}"] = decode_conditions(shape, device, b, c)
    out["total_s"] = round(time.perf_counter() - t0, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="llama-3-8b", choices=sorted(SHAPES))
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", choices=PARTS, help="one GPU measurement instead of the check")
    ap.add_argument("--prefixes", type=int, nargs="+", default=list(SHARED_PREFIXES))
    ap.add_argument("--batches", type=int, nargs="+", default=list(SHARED_BATCHES))
    ap.add_argument("--tails", type=int, nargs=2, default=[128, 384], metavar=("LO", "HI"))
    ap.add_argument(
        "--layouts", default=None, help="decode_served, prefill_batches: the steps' JSON to time"
    )
    ap.add_argument("--runs", nargs="+", help="decode_step_served: only these runs' batches")
    ap.add_argument("--means", type=int, nargs="+", default=[2048, 8192], help="decode_ragged")
    ap.add_argument(
        "--ragged-batches", type=int, nargs="+", default=[8, 16, 25, 32, 64], help="decode_ragged"
    )
    ap.add_argument(
        "--pool-pages", type=int, default=20480, help="decode_step_served: the KV pool's pages"
    )
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.only:  # the shared-pages table: shards x prefixes x batches (those the pool holds)
        result: dict = {"method": "kernels.bench.bench_ms (CUDA graph, L2 flushed, median)"}
        if args.only == "decode_step_shared":  # whole llama-3-8b steps, one GPU
            result["method"] = "graphed decode steps, host to sampled tokens, wall median of 15"
            w = random_weights(SHAPES[args.shape], 0, device)
            result[args.shape] = {
                f"p{prefix}": decode_step_shared(
                    SHAPES[args.shape], w, device, prefix, args.batches, tuple(args.tails)
                )
                for prefix in args.prefixes
            }
        if args.only == "decode_served":
            with open(args.layouts) as f:
                served = json.load(f)
            for run_name, layouts in served.items():
                model, tp = SHARED_SHARDS[layouts["shard"]]
                heads = attention_shard(model, tp)
                result[run_name] = decode_served(heads, device, layouts["steps"])
        if args.only == "decode_step_served":  # whole llama-3-8b steps, one GPU
            result["method"] = "graphed decode steps, GPU ms between events, median of 10"
            with open(args.layouts) as f:
                served = json.load(f)
            w = random_weights(SHAPES[args.shape], 0, device)
            result["pool_pages"] = args.pool_pages
            for run_name, layouts in served.items():
                if layouts["shard"] == args.shape and run_name in (args.runs or [run_name]):
                    steps = layouts["steps"]
                    result[run_name] = decode_step_served(
                        SHAPES[args.shape], w, device, steps, args.pool_pages
                    )
        if args.only == "prefill_batches":  # per shard: {"steps": [[[new, ctx], ...], ...]}
            if not args.layouts:
                ap.error("--only prefill_batches needs --layouts FILE (prefill_batches.py layouts)")
            with open(args.layouts) as f:
                served = json.load(f)
            for shard, (model, tp) in SHARED_SHARDS.items():
                if shard in served:
                    heads = attention_shard(model, tp)
                    result[shard] = prefill_batches(heads, device, served[shard]["steps"])
        if args.only == "decode_ragged":
            for shard, (model, tp) in SHARED_SHARDS.items():
                result[shard] = decode_ragged(
                    attention_shard(model, tp),
                    device,
                    tuple(args.ragged_batches),
                    tuple(args.means),
                )
        for shard, (model, tp) in SHARED_SHARDS.items():
            if args.only != "decode_shared_pages":
                break
            heads = attention_shard(model, tp)
            result[shard] = {
                f"p{prefix}": decode_shared_pages(
                    heads, device, prefix=prefix, batches=args.batches, tails=tuple(args.tails)
                )
                for prefix in args.prefixes
            }
    else:
        result = run(args.shape, device)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
