"""The real KV pool: one K and one V tensor per layer, laid out as kernels/paged_decode expects.

Page ids are the simulator's: a sequence's `pages` list (handed out by sim's page pool, shared
through its prefix index) is its block table here, unchanged.
"""

from __future__ import annotations

import torch


class KVPool:
    def __init__(
        self,
        num_layers: int,
        num_pages: int,
        num_kv_heads: int,
        page_size: int,
        head_dim: int,
        device: torch.device | str,
        dtype: torch.dtype = torch.bfloat16,
        poison: bool = False,
    ):
        shape = (num_layers, num_pages, num_kv_heads, page_size, head_dim)
        # poison=True fills with NaN: a read of a slot nothing wrote reaches the logits.
        make = torch.full if poison else torch.empty
        args = (float("nan"),) if poison else ()
        self.k = make(shape, *args, device=device, dtype=dtype)  # [L, pages, H_kv, page, D]
        self.v = make(shape, *args, device=device, dtype=dtype)
        self.num_pages, self.page_size = num_pages, page_size

    @property
    def num_bytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer i's K and V pools, [num_pages, H_kv, page_size, D] views."""
        return self.k[i], self.v[i]

    def write(
        self,
        i: int,
        k: torch.Tensor,
        v: torch.Tensor,
        slot_pages: torch.Tensor,
        slot_offsets: torch.Tensor,
    ) -> None:
        """Store new tokens' K and V ([tokens, H_kv, D]) at (page, offset) pairs ([tokens] int64)."""
        k_pool, v_pool = self.layer(i)
        k_pool[slot_pages, :, slot_offsets] = k
        v_pool[slot_pages, :, slot_offsets] = v
