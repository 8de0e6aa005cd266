"""Measure the simulator's latency tables on the GPU: `python -m kernels.calibrate` (`kvsched calibrate`).

For each (model preset, tensor-parallel degree) it times one layer's parts on one GPU, with that
GPU's shard shapes (heads, MLP width and vocabulary split over `tp`), BF16, device events
(`triton.testing.do_bench`, median, L2 flushed before each repetition):
  gemm          the four linear layers QKV, O, gate+up, down (torch.nn.functional.linear)
                over token counts;
  lm_head       the vocabulary projection over logit rows;
  decode_attn   our paged decode kernel (page 16, grouped) over batch x context per request;
  prefill_attn  our paged prefill kernel (kernels.paged_prefill, page 16): a chunk of n new
                tokens against c cached ones plus itself (causal, bottom-right aligned) over
                n x c, n from 1 (table version 2; version 1 timed SDPA with KV expanded to the
                query heads, kept as `prefill_attn_sdpa` where an older file had it);
  cascade_prefix_attn  the shared-prefix pass of kernels.cascade_decode for one group of g
                decoding sequences sharing p cached tokens, over g x p (the tails are priced by
                decode_attn over the tail lengths; the merge is not included).
Norms, activations and rotary embeddings are not timed: they are a few percent of a step.
The tensor-parallel all-reduce is measured on two GPUs by kernels.allreduce (NCCL), which adds a
top-level `allreduce_nccl` section to the same file.
`--parts prefill,cascade` re-measures only those tables and keeps the rest of each table.

`--fidelity N` also times N held-out random step compositions (ragged decode batches, prefill
chunks, mixes) as one composite layer (all parts launched back to back) plus the LM head, and
writes them beside the tables; `benchmarks/latency_fidelity.py` compares them with what
`sim.latency.calibrated.CalibratedLatency` predicts from the tables.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernels import CALIBRATION_DIR
from kernels.bench import device

SCHEMA = "kvsched-calibration/1"  # must match sim.latency.calibrated.SCHEMA
# Bumped when a table changes meaning but not shape (the schema stays readable by sim/):
# 2 = prefill_attn from kernels.paged_prefill with n >= 1, cascade_prefix_attn added.
TABLE_VERSION = 2
ALL_PARTS = ("gemm", "lm_head", "decode", "prefill", "cascade")
DEFAULT_TARGETS = (("article-70b", 2), ("llama-3-8b", 1), ("llama-3-70b", 2))
# Every 32 tokens from 256 to 1,024 and every 128 to 4,096 (session 11): cuBLAS's time is a
# staircase in the token count (tile quantization, and kernel choices that change at some
# counts: 448 tokens ran 1.3x 512's on both 70B TP-2 and 8B shards), which interpolation between
# points 128-1,024 tokens apart prices low (a 555-token step 17% under its measurement).
GEMM_TOKENS = tuple(
    sorted(
        {1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 160, 192}
        | set(range(256, 1024, 32))
        | set(range(1024, 4096, 128))
        | {4096, 5120, 6144, 8192, 12288, 16384}
    )
)
LM_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# Off the powers of two too (session 10): the split rule's speed is not linear in the batch
# between them (wave_fit's one-wave splits fill the resident slots at 16 / 32 / 64 sequences
# x 8 KV heads; 40 x 8 = 320 programs are too few for one wave, 96 x 8 too many), and the
# simulator interpolates the table bilinearly.
DECODE_BATCH = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 96, 128, 256)
DECODE_CONTEXT = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
PREFILL_NEW = (1, 16, 64, 256, 1024, 2048, 4096, 8192)
PREFILL_CONTEXT = (0, 512, 1024, 2048, 4096, 8192, 16384, 32768)
CASCADE_GROUP = (2, 4, 8, 16, 32, 64, 128)
CASCADE_PREFIX = (256, 512, 1024, 2048, 4096, 8192, 16384)
PAGE_SIZE = 16


def model_shapes(name: str) -> dict:
    from kernels.shapes import MODEL_SHAPES

    if name not in MODEL_SHAPES:
        raise ValueError(f"unknown model preset {name!r}; known: {sorted(MODEL_SHAPES)}")
    return MODEL_SHAPES[name]


def shard_shapes(preset: dict, tp: int) -> dict[str, int]:
    """Per-GPU shapes under tensor parallelism (same keys as sim.latency.calibrated.expected_shapes)."""
    if preset["num_q_heads"] % tp or preset["intermediate_size"] % tp:
        raise ValueError(f"tp={tp} does not divide the heads / MLP width of {preset}")
    return {
        "num_q_heads": preset["num_q_heads"] // tp,
        "num_kv_heads": max(1, preset["num_kv_heads"] // tp),
        "head_dim": preset["head_dim"],
        "hidden_size": preset["hidden_size"],
        "intermediate_size": preset["intermediate_size"] // tp,
        "vocab_size": -(-preset["vocab_size"] // tp),
    }


def fidelity_plans(
    n: int,
    seed: int = 20240611,
    max_batch: int = 256,
    max_ctx: int = 32768,
    max_new: int = 4096,
    max_chunk_ctx: int = 16384,
) -> list[dict]:
    """Held-out random step compositions, off the calibration grids (log-uniform draws).

    A third decode-only (ragged contexts), a third mixed (decodes plus one or two prefill
    chunks), a third prefill-heavy (chunks, some with cached context, plus a few decodes).
    """
    rng = np.random.default_rng(seed)
    plans = []
    for i in range(n):
        kind = i % 3
        if kind == 2:
            n_dec = int(rng.integers(0, 9))
        else:
            n_dec = int(round(np.exp(rng.uniform(0, np.log(max_batch)))))
        min_ctx = max(16, max_ctx // 256)
        dec = np.exp(rng.uniform(np.log(min_ctx), np.log(max_ctx), size=n_dec)).astype(int)
        n_chunks = 0 if kind == 0 else int(rng.integers(1, 3))
        new = np.exp(rng.uniform(np.log(16), np.log(max_new), size=n_chunks)).astype(int)
        ctx = np.where(rng.random(n_chunks) < 0.4, 0, rng.integers(0, max_chunk_ctx, size=n_chunks))
        if n_dec == 0 and n_chunks == 0:
            dec = np.array([int(rng.integers(min_ctx, max_ctx))])
        plans.append(
            {
                "prefill_new": new.tolist(),
                "prefill_ctx": ctx.tolist(),
                "decode_ctx": dec.tolist(),
            }
        )
    return plans


def prefill_launch_configs() -> dict:
    from kernels.paged_prefill import PREFILL_LAUNCH_CONFIGS

    return {k: dict(v) for k, v in PREFILL_LAUNCH_CONFIGS.items()}


_PLAN_KEYS = ("block_m", "block_n", "programs_per_sm", "min_split_tokens", "pad_min_rows")


def fidelity_plans_extra(
    n: int,
    seed: int = 20261130,
    max_batch: int = 256,
    max_ctx: int = 32768,
    page_size: int = 16,
) -> list[dict]:
    """Held-out compositions of the two kinds `fidelity_plans` lacks (log-uniform draws):

    even i, "prefix_hit": 1-3 chunks of 1-512 new tokens over 1K-32K cached tokens (a prefix-cache
    hit leaves few tokens to compute over a long context), plus 0-64 decodes;
    odd i, "cascade": 1-3 groups of 2-64 decodes sharing a 256-8K-token prefix (whole pages; each
    member's own tail 1-2K tokens), plus 0-16 unshared decodes and, in a third of them, one chunk
    of 1-1K tokens over 0-8K. (Ranges as at max_ctx = 32K; they scale with it.)
    `cascade_groups` [[size, prefix], ...] name the first sum(size) decodes, in order.
    """
    rng = np.random.default_rng(seed)

    def logu(lo: float, hi: float, size: int | None = None):
        return np.exp(rng.uniform(np.log(lo), np.log(hi), size=size)).astype(int)

    new_hi = max(2, min(512, max_ctx // 64))  # 512 at 32K
    ctx_lo = max(1, max_ctx // 32)  # 1K
    pre_lo = max(page_size, max_ctx // 128)  # 256
    pre_hi = max(pre_lo + 1, max_ctx // 4)  # 8K
    tail_hi = max(2, max_ctx // 16)  # 2K
    dec_lo = max(16, max_ctx // 256)  # 128
    plans = []
    for i in range(n):
        groups: list[list[int]] = []
        dec: list[int] = []
        if i % 2 == 0:
            k = int(rng.integers(1, 4))
            new = logu(1, new_hi, k)
            ctx = logu(ctx_lo, max(ctx_lo + 1, max_ctx - new_hi), k)
            dec = logu(dec_lo, max_ctx, int(rng.integers(0, min(64, max_batch) + 1))).tolist()
        else:
            for _ in range(int(rng.integers(1, 4))):
                size = int(logu(2, min(64, max(2, max_batch)) + 1))
                prefix = max(page_size, int(logu(pre_lo, pre_hi)) // page_size * page_size)
                if len(dec) + size > max_batch:
                    break
                groups.append([size, prefix])
                dec += (prefix + logu(1, tail_hi, size)).tolist()
            alone = int(rng.integers(0, min(16, max_batch - len(dec)) + 1))
            dec += logu(dec_lo, max_ctx, alone).tolist()
            k = int(rng.random() < 1 / 3)
            new = logu(1, 2 * new_hi, k)
            ctx = rng.integers(0, max(1, max_ctx // 4), size=k)
        plans.append(
            {
                "kind": "prefix_hit" if i % 2 == 0 else "cascade",
                "prefill_new": [int(x) for x in new],
                "prefill_ctx": [int(x) for x in ctx],
                "decode_ctx": [int(x) for x in dec],
                "cascade_groups": groups,
            }
        )
    return plans


class LayerParts:
    """One layer's weights, KV pool and activations on the GPU, and callables for each part."""

    def __init__(
        self,
        shapes: dict[str, int],
        max_tokens: int,
        pool_tokens: int,
        cfg: dict,
        prefill_cfg: dict | None = None,
        cascade_cfg: dict | None = None,
    ):
        import torch

        from kernels.cascade_decode import DEFAULT_PREFIX_CONFIG
        from kernels.paged_prefill import DEFAULT_PREFILL_CONFIG

        self.torch = torch
        self.s = shapes
        self.cfg = cfg
        self.prefill_cfg = {**DEFAULT_PREFILL_CONFIG, **(prefill_cfg or {})}
        self.cascade_cfg = {**DEFAULT_PREFIX_CONFIG, **(cascade_cfg or {})}
        dev, bf16 = device(), torch.bfloat16
        self.dev = dev
        h, d = shapes["hidden_size"], shapes["head_dim"]
        hq, hkv, inter = shapes["num_q_heads"], shapes["num_kv_heads"], shapes["intermediate_size"]

        def rand(*shape):
            return torch.randn(shape, device=dev, dtype=bf16)

        # nn.Linear layout: weight [out, in].
        self.w_qkv = rand((hq + 2 * hkv) * d, h)
        self.w_o = rand(h, hq * d)
        self.w_gu = rand(2 * inter, h)
        self.w_down = rand(h, inter)
        self.w_lm = rand(shapes["vocab_size"], h)
        self.x = rand(max_tokens, h)
        self.attn_out = rand(max_tokens, hq * d)
        self.act = rand(max_tokens, inter)
        n_pages = -(-pool_tokens // PAGE_SIZE)
        self.k_cache = rand(n_pages, hkv, PAGE_SIZE, d)
        self.v_cache = rand(n_pages, hkv, PAGE_SIZE, d)
        self.n_pages = n_pages
        self.gen = torch.Generator(device=dev).manual_seed(0)

    def gemm(self, tokens: int):
        F = self.torch.nn.functional
        x, a, m = self.x[:tokens], self.attn_out[:tokens], self.act[:tokens]

        def run():
            F.linear(x, self.w_qkv)
            F.linear(a, self.w_o)
            F.linear(x, self.w_gu)
            F.linear(m, self.w_down)

        return run

    def lm_head(self, rows: int):
        F = self.torch.nn.functional
        x = self.x[:rows]
        return lambda: F.linear(x, self.w_lm)

    def decode(self, lens: list[int]):
        """Paged decode over `lens` with pages drawn at random from the pool, prepared once and
        then only launched, as the engine issues it in every layer of a step (session 11: a
        split launch's counter zeroing runs at the step's preparation, not in the timed layer)."""
        from kernels.paged_decode import prepare_decode

        torch = self.torch
        table = self._table(lens)  # decode lengths are >= 1: the same pages, the same draws
        seq_lens = torch.tensor(lens, dtype=torch.int32, device=self.dev)
        q = torch.randn(
            (len(lens), self.s["num_q_heads"], self.s["head_dim"]),
            device=self.dev,
            dtype=torch.bfloat16,
        )
        out = torch.empty_like(q)
        hints = dict(max_seq_len=max(lens), total_tokens=sum(lens), **self.cfg)
        # Validated (bounds, shapes) once, at the preparation.
        launch = prepare_decode(q, self.k_cache, self.v_cache, table, seq_lens, out=out, **hints)
        return lambda: launch.launch(self.k_cache, self.v_cache)

    def cascade_decode(self, lens: list[int], groups: list[list[int]]):
        """Cascade decode over `lens`: groups [[size, prefix], ...] share their first `prefix`
        tokens (the same pages) among the first sum(size) decodes in order; the rest are alone."""
        from kernels.cascade_decode import cascade_decode_attention, plan_cascade

        torch = self.torch
        grouped = sum(s for s, _ in groups)
        sizes = [s for s, _ in groups] + [1] * (len(lens) - grouped)
        prefixes = [p for _, p in groups] + [0] * (len(lens) - grouped)
        per_seq = [max(1, -(-n // PAGE_SIZE)) for n in lens]
        shared = np.repeat([p // PAGE_SIZE for p in prefixes], sizes).tolist()
        need = sum(p // PAGE_SIZE for p in prefixes) + sum(
            a - b for a, b in zip(per_seq, shared, strict=True)
        )
        if need > self.n_pages:
            raise ValueError(f"pool of {self.n_pages} pages too small for {need}")
        perm = torch.randperm(self.n_pages, generator=self.gen, device=self.dev)[:need].cpu()
        table = torch.zeros((len(lens), max(per_seq)), dtype=torch.int32)
        at, b = 0, 0
        for size, prefix in zip(sizes, prefixes, strict=True):
            pp = prefix // PAGE_SIZE
            head = perm[at : at + pp]
            at += pp
            for _ in range(size):
                table[b, :pp] = head
                table[b, pp : per_seq[b]] = perm[at : at + per_seq[b] - pp]
                at += per_seq[b] - pp
                b += 1
        table = table.to(self.dev)
        seq_lens = torch.tensor(lens, dtype=torch.int32, device=self.dev)
        hq, hkv = self.s["num_q_heads"], self.s["num_kv_heads"]
        plan = plan_cascade(
            table,
            seq_lens,
            sizes,
            prefixes,
            PAGE_SIZE,
            hkv,
            hq // hkv,
            device=self.dev,
            prefix_config=self.cascade_cfg,
        )
        q = torch.randn((len(lens), hq, self.s["head_dim"]), device=self.dev, dtype=torch.bfloat16)
        out = torch.empty_like(q)
        kw = dict(out=out, prefix_config=self.cascade_cfg, decode_config=self.cfg)
        cascade_decode_attention(q, self.k_cache, self.v_cache, plan, **kw)  # validates once
        return lambda: cascade_decode_attention(
            q, self.k_cache, self.v_cache, plan, check_bounds=False, **kw
        )

    def _table(self, n_tokens_list: list[int]):
        """Block tables of random pool pages, one row per length."""
        torch = self.torch
        pages = [max(1, -(-n // PAGE_SIZE)) for n in n_tokens_list]
        if sum(pages) > self.n_pages:
            raise ValueError(f"pool of {self.n_pages} pages too small for {sum(pages)}")
        perm = torch.randperm(self.n_pages, generator=self.gen, device=self.dev)[: sum(pages)]
        table = torch.zeros((len(pages), max(pages)), dtype=torch.int32, device=self.dev)
        at = 0
        for b, p in enumerate(pages):
            table[b, :p] = perm[at : at + p].to(torch.int32)
            at += p
        return table

    def prefill(self, new: int, ctx: int):
        """Our paged prefill kernel: `new` tokens over `ctx` cached + themselves (causal),
        prepared once and then only launched (as `decode`)."""
        from kernels.paged_prefill import LAUNCH_KEYS, plan_prefill, prepare_prefill

        torch = self.torch
        hq, hkv, d = self.s["num_q_heads"], self.s["num_kv_heads"], self.s["head_dim"]
        table = self._table([ctx + new])
        lens = torch.tensor([ctx + new], dtype=torch.int32, device=self.dev)
        cu = torch.tensor([0, new], dtype=torch.int32, device=self.dev)
        q = torch.randn((new, hq, d), device=self.dev, dtype=torch.bfloat16)
        out = torch.empty_like(q)
        pcfg = self.prefill_cfg
        plan = plan_prefill(
            [new],
            [ctx + new],
            hkv,
            hq // hkv,
            device=self.dev,
            **{k: pcfg[k] for k in _PLAN_KEYS if k in pcfg},
        )
        # Launch knobs given in the config override the plan's work-class config.
        launch = {k: pcfg[k] for k in LAUNCH_KEYS if k in pcfg}
        args = (q, self.k_cache, self.v_cache, table, lens, cu)
        prepared = prepare_prefill(*args, out=out, plan=plan, **launch)  # validates once
        return lambda: prepared.launch(self.k_cache, self.v_cache)

    def cascade_prefix(self, group_size: int, prefix: int):
        """The cascade's shared-prefix pass: `group_size` decode queries over `prefix` tokens."""
        from kernels.paged_prefill import paged_prefill_attention, plan_prefill

        torch = self.torch
        hq, hkv, d = self.s["num_q_heads"], self.s["num_kv_heads"], self.s["head_dim"]
        table = self._table([prefix])
        lens = torch.tensor([prefix], dtype=torch.int32, device=self.dev)
        cu = torch.tensor([0, group_size], dtype=torch.int32, device=self.dev)
        q = torch.randn((group_size, hq, d), device=self.dev, dtype=torch.bfloat16)
        out = torch.empty(q.shape, dtype=torch.float32, device=self.dev)
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=self.dev)
        ccfg = self.cascade_cfg
        plan = plan_prefill(
            [group_size],
            [prefix],
            hkv,
            hq // hkv,
            device=self.dev,
            causal=False,
            **{k: ccfg[k] for k in ("block_m", "block_n", "programs_per_sm", "min_split_tokens")},
        )
        launch = {k: ccfg[k] for k in ("block_n", "num_warps", "num_stages")}
        args = (q, self.k_cache, self.v_cache, table, lens, cu)
        kw = dict(causal=False, out=out, lse_out=lse, plan=plan, **launch)
        paged_prefill_attention(*args, **kw)
        return lambda: paged_prefill_attention(*args, check_bounds=False, **kw)

    def prefill_sdpa(self, new: int, ctx: int):
        """Causal attention of `new` query tokens over `ctx + new` keys (bottom-right aligned)."""
        torch = self.torch
        F = torch.nn.functional
        hq, d = self.s["num_q_heads"], self.s["head_dim"]
        q = torch.randn((1, hq, new, d), device=self.dev, dtype=torch.bfloat16)
        # KV expanded to the query heads: prefill attention is compute-bound, so GQA's smaller
        # KV changes little, and every SDPA backend accepts this layout.
        k = torch.randn((1, hq, ctx + new, d), device=self.dev, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        if ctx == 0:
            return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(new, ctx + new)
        try:
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        except RuntimeError:  # a torch without a kernel for it: an explicit boolean mask
            mask = torch.ones((new, ctx + new), dtype=torch.bool, device=self.dev).tril(ctx)
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@dataclass(frozen=True)
class Grids:
    """The measured grid axes (tests shrink them to run the whole path on CPU)."""

    gemm_tokens: tuple[int, ...] = GEMM_TOKENS
    lm_tokens: tuple[int, ...] = LM_TOKENS
    decode_batch: tuple[int, ...] = DECODE_BATCH
    decode_context: tuple[int, ...] = DECODE_CONTEXT
    prefill_new: tuple[int, ...] = PREFILL_NEW
    prefill_context: tuple[int, ...] = PREFILL_CONTEXT
    cascade_group: tuple[int, ...] = CASCADE_GROUP
    cascade_prefix: tuple[int, ...] = CASCADE_PREFIX
    fidelity_max_new: int = 4096
    fidelity_max_chunk_ctx: int = 16384


def calibrate_one(
    name: str,
    tp: int,
    fidelity_n: int,
    cfg: dict,
    log,
    preset: dict | None = None,
    grids: Grids = Grids(),
    parts_to_measure: tuple[str, ...] = ALL_PARTS,
    old_table: dict | None = None,
    attn_cache: dict | None = None,
    prefill_cfg: dict | None = None,
    cascade_cfg: dict | None = None,
    fidelity_extra: int = 0,
) -> tuple[dict, list]:
    """One (model, tp): its table for the calibration file and its fidelity records.

    Only `parts_to_measure` are timed; the other parts are taken from `old_table` (which must
    then hold them). `attn_cache` (keyed by the attention shard shape) lets presets with the
    same heads and head_dim share one measurement of the attention tables.
    """
    import torch

    from kernels.bench import bench_ms

    preset = model_shapes(name) if preset is None else preset
    shapes = shard_shapes(preset, tp)
    g = grids
    want = set(parts_to_measure)
    if want - set(ALL_PARTS):
        raise ValueError(f"unknown parts {sorted(want - set(ALL_PARTS))}; known: {ALL_PARTS}")
    keep = set(ALL_PARTS) - want
    if keep and old_table is None:
        raise ValueError(f"no earlier table for {name}:tp{tp} to keep {sorted(keep)} from")
    pool_tokens = max(
        g.prefill_new[-1] + g.prefill_context[-1] + PAGE_SIZE,
        g.cascade_prefix[-1] + PAGE_SIZE,
        g.decode_batch[-1] * g.decode_context[-1]
        if ("decode" in want or fidelity_n or fidelity_extra)
        else 0,
    )
    parts = LayerParts(shapes, max(g.gemm_tokens), pool_tokens, cfg, prefill_cfg, cascade_cfg)
    table: dict = {
        "model": name,
        "tp": tp,
        "shapes": shapes,
        "page_size": PAGE_SIZE,
        "dtype": "bfloat16",
        "allreduce": "see the top-level allreduce_nccl section (tp 2, NCCL) where present",
        "table_version": TABLE_VERSION,
    }
    if old_table is not None:
        for key in ("gemm", "lm_head", "decode_attn", "prefill_attn", "prefill_attn_sdpa"):
            if key in old_table:
                table[key] = old_table[key]
        if (
            "prefill_attn_sdpa" not in old_table
            and "prefill_attn" in old_table
            and old_table.get("table_version", 1) < 2
        ):
            table["prefill_attn_sdpa"] = old_table["prefill_attn"]
        if "cascade_prefix_attn" in old_table:
            table["cascade_prefix_attn"] = old_table["cascade_prefix_attn"]
    attn_key = (shapes["num_q_heads"], shapes["num_kv_heads"], shapes["head_dim"])
    cached = (attn_cache if attn_cache is not None else {}).setdefault(attn_key, {})

    if "gemm" in want:
        gemm_ms = [bench_ms(parts.gemm(t)) for t in g.gemm_tokens]
        table["gemm"] = {"tokens": list(g.gemm_tokens), "ms": gemm_ms}
        log(f"  gemm: {gemm_ms[0]:.3f} ms @1 .. {gemm_ms[-1]:.3f} ms @{g.gemm_tokens[-1]}")
    if "lm_head" in want:
        lm_ms = [bench_ms(parts.lm_head(t)) for t in g.lm_tokens]
        table["lm_head"] = {"tokens": list(g.lm_tokens), "ms": lm_ms}
        log(f"  lm_head: {lm_ms[0]:.3f} .. {lm_ms[-1]:.3f} ms")
    if "decode" in want:
        if "decode_attn" not in cached:
            dec = [
                [bench_ms(parts.decode([c] * b)) for c in g.decode_context] for b in g.decode_batch
            ]
            cached["decode_attn"] = {
                "batch": list(g.decode_batch),
                "context": list(g.decode_context),
                "ms": dec,
            }
        table["decode_attn"] = cached["decode_attn"]
        dec = table["decode_attn"]["ms"]
        log(f"  decode: {dec[0][0]:.4f} .. {dec[-1][-1]:.3f} ms")
    if "prefill" in want:
        if "prefill_attn" not in cached:
            pre = [
                [bench_ms(parts.prefill(n, c)) for c in g.prefill_context] for n in g.prefill_new
            ]
            cached["prefill_attn"] = {
                "new_tokens": list(g.prefill_new),
                "context": list(g.prefill_context),
                "ms": pre,
                "source": "kernels.paged_prefill (page 16, GQA-grouped, causal bottom-right)",
                "config": dict(parts.prefill_cfg),
                "launch_configs": prefill_launch_configs(),
            }
        table["prefill_attn"] = cached["prefill_attn"]
        pre = table["prefill_attn"]["ms"]
        log(f"  prefill: {pre[0][0]:.4f} .. {pre[-1][-1]:.3f} ms")
    if "cascade" in want:
        if "cascade_prefix_attn" not in cached:
            cas = [
                [bench_ms(parts.cascade_prefix(gs, p)) for p in g.cascade_prefix]
                for gs in g.cascade_group
            ]
            cached["cascade_prefix_attn"] = {
                "group_size": list(g.cascade_group),
                "prefix_len": list(g.cascade_prefix),
                "ms": cas,
                "source": "kernels.cascade_decode prefix pass (paged_prefill, causal=False)",
                "config": dict(parts.cascade_cfg),
            }
        table["cascade_prefix_attn"] = cached["cascade_prefix_attn"]
        cas = table["cascade_prefix_attn"]["ms"]
        log(f"  cascade prefix: {cas[0][0]:.4f} .. {cas[-1][-1]:.3f} ms")

    records = []
    plans = fidelity_plans(
        fidelity_n,
        max_batch=g.decode_batch[-1],
        max_ctx=g.decode_context[-1],
        max_new=g.fidelity_max_new,
        max_chunk_ctx=g.fidelity_max_chunk_ctx,
    )
    plans += fidelity_plans_extra(
        fidelity_extra, max_batch=g.decode_batch[-1], max_ctx=g.decode_context[-1]
    )
    for plan in plans:
        new, ctx, lens = plan["prefill_new"], plan["prefill_ctx"], plan["decode_ctx"]
        tokens = sum(new) + len(lens)
        runs = [parts.gemm(tokens)]
        if lens and plan.get("cascade_groups"):
            runs.append(parts.cascade_decode(lens, plan["cascade_groups"]))
        elif lens:
            runs.append(parts.decode(lens))
        runs += [parts.prefill(n, c) for n, c in zip(new, ctx, strict=True)]

        def layer(runs=runs):
            for r in runs:
                r()

        layer_ms = bench_ms(layer)
        lm_ms_i = bench_ms(parts.lm_head(len(lens) + len(new)))
        step_s = preset["num_layers"] * layer_ms * 1e-3 + lm_ms_i * 1e-3
        records.append({**plan, "layer_ms": layer_ms, "lm_head_ms": lm_ms_i, "measured_s": step_s})
    if records:
        log(f"  fidelity: {len(records)} compositions measured")
    del parts
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return table, records


# Top-level sections of the calibration file that other runs measure (NCCL on two GPUs; the
# engine's shared-pages decode fit): a re-calibration keeps them as they are.
KEPT_SECTIONS = ("allreduce_nccl", "decode_shared_reads", "decode_ragged", "prefill_batches")


def merge_tables(old: dict | None, new_tables: list[dict], meta: dict) -> dict:
    """New file content: `meta` plus old tables for other (model, tp), replaced where re-measured.

    Top-level sections measured elsewhere (`allreduce_nccl`, `decode_shared_reads`) and the
    earlier run's metadata (`previous_runs`) are kept.
    """
    keys = {(t["model"], t["tp"]) for t in new_tables}
    kept = [t for t in (old or {}).get("tables", []) if (t["model"], t["tp"]) not in keys]
    extra = {k: v for k, v in (old or {}).items() if k in KEPT_SECTIONS}
    return {"schema": SCHEMA, **meta, **extra, "tables": kept + new_tables}


def parse_targets(text: str) -> list[tuple[str, int]]:
    """'article-70b:2,llama-3-8b:1' -> [('article-70b', 2), ('llama-3-8b', 1)]."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, tp = item.partition(":")
        if not tp.isdigit() or int(tp) < 1:
            raise ValueError(f"target {item!r} must be MODEL:TP with TP >= 1")
        out.append((name, int(tp)))
    if not out:
        raise ValueError("no targets given")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kvsched calibrate", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--targets",
        default=",".join(f"{m}:{t}" for m, t in DEFAULT_TARGETS),
        help="comma-separated MODEL:TP list (default: the studies' presets)",
    )
    ap.add_argument("--out", type=Path, default=CALIBRATION_DIR / "h200.json")
    ap.add_argument("--fidelity", type=int, default=0, help="held-out compositions to measure")
    ap.add_argument(
        "--fidelity-extra",
        type=int,
        default=0,
        help="also this many prefix-hit / cascade compositions (fidelity_plans_extra)",
    )
    ap.add_argument(
        "--fidelity-out",
        type=Path,
        default=None,
        help="where to write them (default: <out stem>_fidelity.json)",
    )
    ap.add_argument("--kernel-config", default="{}", help="JSON kwargs for the decode launcher")
    ap.add_argument("--prefill-config", default="{}", help="JSON paged-prefill plan config")
    ap.add_argument(
        "--prefill-launch-configs",
        default="",
        help="JSON (or a file of it): per-work-class prefill launch configs to use",
    )
    ap.add_argument("--cascade-config", default="{}", help="JSON cascade prefix-pass config")
    ap.add_argument(
        "--parts",
        default=",".join(ALL_PARTS),
        help=f"comma-separated subset of {','.join(ALL_PARTS)} to re-measure; the other parts "
        "of each table are kept from the existing --out file",
    )
    args = ap.parse_args(argv)
    targets = parse_targets(args.targets)
    parts = tuple(p for p in args.parts.split(",") if p)

    import torch

    if not torch.cuda.is_available():
        print("kvsched calibrate needs a CUDA GPU.")
        return 2
    from kernels.bench import GRAPH_FALLBACKS, copy_ceiling_tbps, environment

    cfg = json.loads(args.kernel_config)
    if args.prefill_launch_configs:
        from kernels.bench_prefill import load_json_arg
        from kernels.paged_prefill import set_prefill_launch_configs

        set_prefill_launch_configs(load_json_arg(args.prefill_launch_configs))
    env = environment()
    print(f"# {env}", flush=True)
    meta = {
        **env,
        "copy_tbps": copy_ceiling_tbps(),
        "kernel_config": cfg,
        "method": "CUDA graph replay timed with events, median, L2 flushed before each; "
        "per layer, per GPU shard; decode and prefill attention prepared once per step and "
        "timed as the launches every layer issues",
        "measured_parts": list(parts),
    }
    fid_path = args.fidelity_out or args.out.with_name(args.out.stem + "_fidelity.json")
    old = json.loads(args.out.read_text()) if args.out.is_file() else None
    if old and set(parts) != set(ALL_PARTS):
        # The parts not re-measured keep their earlier date.
        meta["kept_parts_date"] = old.get("kept_parts_date", old.get("date"))
    old_fid = json.loads(fid_path.read_text()) if fid_path.is_file() else {}
    tables, fidelity = [], {}
    old_tables = {(t["model"], t["tp"]): t for t in (old or {}).get("tables", [])}
    attn_cache: dict = {}
    for name, tp in targets:
        print(f"# calibrating {name} tp={tp}: {','.join(parts)}", flush=True)
        table, records = calibrate_one(
            name,
            tp,
            args.fidelity,
            cfg,
            lambda m: print(m, flush=True),
            parts_to_measure=parts,
            old_table=old_tables.get((name, tp)),
            attn_cache=attn_cache,
            prefill_cfg=json.loads(args.prefill_config),
            cascade_cfg=json.loads(args.cascade_config),
            fidelity_extra=args.fidelity_extra,
        )
        tables.append(table)
        if records:
            fidelity[f"{name}:tp{tp}"] = records
        # Write after every target: a run cut short keeps what it measured.
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta["graph_fallbacks"] = list(GRAPH_FALLBACKS)
        if parts:  # --parts "" only measures the fidelity compositions
            args.out.write_text(json.dumps(merge_tables(old, tables, meta), indent=1) + "\n")
        if fidelity:
            runs = {**old_fid.get("runs", {}), **fidelity}
            fid_meta = {
                **env,
                "prefill": "kernels.paged_prefill",
                "kernel_config": cfg,
                "prefill_launch_configs": prefill_launch_configs(),
            }
            fid_path.write_text(json.dumps({**fid_meta, "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.out}" + (f" and {fid_path}" if fidelity else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
