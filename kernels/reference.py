"""Plain-torch reference for paged decode attention, and builders of random paged KV pools.

The reference gathers each sequence's pages into a contiguous [seq_len, num_kv_heads, head_dim]
block, upcasts to float32, repeats KV heads for their query groups and runs softmax attention.
It is slow on purpose: no paging tricks, nothing shared with the Triton kernel but the layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """One sequence's keys (or values) as [seq_len, num_kv_heads, head_dim], in cache dtype."""
    page_size = cache.shape[2]
    n_pages = -(-seq_len // page_size)
    pages = cache[block_table[:n_pages].long()]  # [n_pages, H_kv, page_size, D]
    pages = pages.permute(0, 2, 1, 3).reshape(-1, cache.shape[1], cache.shape[3])
    return pages[:seq_len]


def paged_decode_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Float32 [batch, num_q_heads, head_dim] attention output; shapes as kernels.paged_decode."""
    batch, num_q_heads, head_dim = q.shape
    group = num_q_heads // k_cache.shape[1]
    scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale
    out = torch.empty((batch, num_q_heads, head_dim), dtype=torch.float32, device=q.device)
    for b in range(batch):
        n = int(seq_lens[b])
        k = gather_kv(k_cache, block_tables[b], n).float().repeat_interleave(group, dim=1)
        v = gather_kv(v_cache, block_tables[b], n).float().repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,thd->ht", q[b].float(), k) * scale  # [H_q, seq_len]
        out[b] = torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), v)
    return out


@dataclass
class PagedKV:
    """A random paged KV pool and the tables that describe a batch of sequences in it."""

    k_cache: torch.Tensor  # [num_pages, H_kv, page_size, D]
    v_cache: torch.Tensor  # [num_pages, H_kv, page_size, D]
    block_tables: torch.Tensor  # [batch, max_pages] int32
    seq_lens: torch.Tensor  # [batch] int32

    @property
    def kv_bytes(self) -> int:
        """Bytes of K and V the batch's attention must read (its tokens only)."""
        per_token = 2 * self.k_cache.shape[1] * self.k_cache.shape[3] * self.k_cache.element_size()
        return int(self.seq_lens.to(torch.int64).sum()) * per_token


def make_paged_kv(
    seq_lens: list[int],
    num_kv_heads: int,
    head_dim: int,
    page_size: int,
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
    spare_pages: int = 0,
    shuffle: bool = True,
) -> PagedKV:
    """Random K/V in a pool with exactly the pages the batch needs (plus `spare_pages`).

    Pages are handed out in a random order (shuffle=True), as a long-running allocator would,
    so no sequence is physically contiguous. Unused block-table entries hold -1, which the
    kernel must never read. Values are N(0, 1): never zeros, which would hide unwritten output.
    """
    pages_per_seq = [-(-n // page_size) for n in seq_lens]
    num_pages = sum(pages_per_seq) + spare_pages
    shape = (num_pages, num_kv_heads, page_size, head_dim)
    k = torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(dtype)
    v = torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(dtype)
    if shuffle:
        order = torch.randperm(num_pages, generator=generator, device=device)
    else:
        order = torch.arange(num_pages, device=device)
    max_pages = max(pages_per_seq, default=1)
    tables = torch.full((len(seq_lens), max(max_pages, 1)), -1, dtype=torch.int32, device=device)
    at = 0
    for b, n_pages in enumerate(pages_per_seq):
        tables[b, :n_pages] = order[at : at + n_pages].to(torch.int32)
        at += n_pages
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    return PagedKV(k, v, tables, lens)


def paged_to_contiguous(kv: PagedKV) -> tuple[torch.Tensor, torch.Tensor]:
    """Equal-length batch's K and V as contiguous [batch, H_kv, seq_len, D] (the SDPA layout)."""
    lens = kv.seq_lens.tolist()
    if len(set(lens)) != 1:
        raise ValueError("paged_to_contiguous needs equal sequence lengths")
    ks = [gather_kv(kv.k_cache, kv.block_tables[b], n) for b, n in enumerate(lens)]
    vs = [gather_kv(kv.v_cache, kv.block_tables[b], n) for b, n in enumerate(lens)]
    k = torch.stack(ks).permute(0, 2, 1, 3).contiguous()
    v = torch.stack(vs).permute(0, 2, 1, 3).contiguous()
    return k, v


def paged_prefill_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    sm_scale: float | None = None,
    causal: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 (out [total_new, H_q, D], lse [total_new, H_q]) of chunked prefill attention.

    Request b's n new queries are q[cu[b]:cu[b+1]]; its cache holds L = seq_lens[b] tokens, the
    last n of them the chunk's own. Causal, bottom-right aligned: query i sees keys < L - n + i + 1.
    `lse` is the natural-log sum-exp of each query's scaled scores.
    """
    total_new, num_q_heads, head_dim = q.shape
    group = num_q_heads // k_cache.shape[1]
    scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale
    out = torch.zeros((total_new, num_q_heads, head_dim), dtype=torch.float32, device=q.device)
    lse = torch.zeros((total_new, num_q_heads), dtype=torch.float32, device=q.device)
    cu = cu_seqlens_q.tolist()
    for b in range(seq_lens.shape[0]):
        lo, hi = cu[b], cu[b + 1]
        n, L = hi - lo, int(seq_lens[b])
        if n == 0:
            continue
        k = gather_kv(k_cache, block_tables[b], L).float().repeat_interleave(group, dim=1)
        v = gather_kv(v_cache, block_tables[b], L).float().repeat_interleave(group, dim=1)
        s = torch.einsum("nhd,thd->hnt", q[lo:hi].float(), k) * scale  # [H_q, n, L]
        if causal:
            keys = torch.arange(L, device=q.device)[None, :]
            limit = (L - n + torch.arange(n, device=q.device))[:, None]
            s = s.masked_fill(keys > limit, float("-inf"))
        out[lo:hi] = torch.einsum("hnt,thd->nhd", torch.softmax(s, dim=-1), v)
        lse[lo:hi] = torch.logsumexp(s, dim=-1).transpose(0, 1)
    return out, lse


def make_prefill_batch(
    ctx_lens: list[int],
    new_lens: list[int],
    num_kv_heads: int,
    group: int,
    head_dim: int,
    page_size: int,
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
    spare_pages: int = 0,
) -> tuple[torch.Tensor, PagedKV, torch.Tensor]:
    """(q [total_new, H_q, D], paged pool holding context + chunk, cu_seqlens_q int32)."""
    lens = [c + n for c, n in zip(ctx_lens, new_lens, strict=True)]
    kv = make_paged_kv(
        lens, num_kv_heads, head_dim, page_size, dtype, device, generator, spare_pages
    )
    total = sum(new_lens)
    q = torch.randn(total, num_kv_heads * group, head_dim, generator=generator, device=device)
    cu = [0]
    for n in new_lens:
        cu.append(cu[-1] + n)
    return q.to(dtype), kv, torch.tensor(cu, dtype=torch.int32, device=device)


def prefill_flops(ctx_lens: list[int], new_lens: list[int], num_q_heads: int, head_dim: int) -> int:
    """Causal-correct FLOPs (QK^T and PV, 2 per multiply-add): query i of a chunk of n over
    c cached tokens attends to c + i + 1 keys."""
    pairs = sum(n * c + n * (n + 1) // 2 for c, n in zip(ctx_lens, new_lens, strict=True))
    return 4 * head_dim * num_q_heads * pairs


def make_shared_prefix_kv(
    seq_lens: list[int],
    group_sizes: list[int],
    prefix_lens: list[int],
    num_kv_heads: int,
    head_dim: int,
    page_size: int,
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> PagedKV:
    """A pool in which each group of consecutive sequences shares its first prefix_lens[g]
    tokens (whole pages, the same page ids in every member's table); the rest of each sequence
    is its own. Pages are shuffled; unused table entries hold -1."""
    pages_per_seq = [-(-n // page_size) for n in seq_lens]
    shared = [p // page_size for p in prefix_lens]
    own = []
    b = 0
    for g, size in enumerate(group_sizes):
        for _ in range(size):
            own.append(pages_per_seq[b] - shared[g])
            b += 1
    num_pages = sum(shared) + sum(own)
    shape = (num_pages, num_kv_heads, page_size, head_dim)
    k = torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(dtype)
    v = torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(dtype)
    order = torch.randperm(num_pages, generator=generator, device=device).to(torch.int32)
    tables = torch.full((len(seq_lens), max(max(pages_per_seq), 1)), -1, dtype=torch.int32)
    tables = tables.to(device)
    at, b = 0, 0
    for g, size in enumerate(group_sizes):
        prefix_pages = order[at : at + shared[g]]
        at += shared[g]
        for _ in range(size):
            tables[b, : shared[g]] = prefix_pages
            tables[b, shared[g] : pages_per_seq[b]] = order[at : at + own[b]]
            at += own[b]
            b += 1
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    return PagedKV(k, v, tables, lens)


# -- the Llama layer's per-token formulas: the definitions kernels/fused.py matches and the
# engine (engine/layers.py) and its plain-torch reference use. Norms and rotary run in float32
# and round to the activation dtype, as the usual Llama implementations do.


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """[tokens, hidden] -> [tokens, hidden], same dtype."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * weight.float()).to(x.dtype)


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 cos and sin, [tokens, head_dim // 2] each, for absolute positions [tokens]."""
    inv_freq = theta ** (
        -torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    )
    angles = positions.float()[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate [tokens, heads, head_dim] by position (halves convention, as Llama's HF port)."""
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)
