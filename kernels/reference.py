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
