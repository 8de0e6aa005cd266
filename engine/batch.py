"""One step's inputs: host-side metadata built with numpy, moved to the device in two copies.

Tokens are laid out decodes first, then prefill chunks, so the decode kernel reads one
contiguous block of query rows and the prefill kernel the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from kernels.paged_decode import PreparedAttention
    from kernels.paged_prefill import PrefillPlan


@dataclass(slots=True)
class SeqWork:
    """What one sequence computes in a step."""

    tokens: np.ndarray  # int [n]: the step's new token ids
    context: int  # tokens already in the KV pool: the position of tokens[0]
    pages: list[int]  # block table (sim's page ids), covering context + n tokens
    is_prefill: bool  # a prompt chunk (paged prefill) or one decode token (paged decode)


@dataclass(slots=True)
class StepInputs:
    num_tokens: int
    num_decodes: int
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    slot_pages: torch.Tensor  # [T] int64: page of each new token's K/V
    slot_offsets: torch.Tensor  # [T] int64: its slot inside the page
    logits_rows: torch.Tensor  # [len(works)] int64: each work's last token row, in input order
    decode_tables: torch.Tensor  # [B_d, max_pages] int32
    decode_lens: torch.Tensor  # [B_d] int32: context + 1
    decode_max_len: int
    decode_total: int
    prefill_tables: torch.Tensor  # [chunks, max_pages] int32
    prefill_cu: torch.Tensor  # [chunks + 1] int32: row offsets inside the prefill rows
    prefill_lens: torch.Tensor  # [chunks] int32: context + chunk
    prefill_q_lens: list[int]  # host copies (the prefill kernel's work list is built from them)
    prefill_seq_lens: list[int]
    prefill_plan: PrefillPlan | None = None  # set by the model
    decode_num_splits: int | None = None  # a forced split count; None: the kernel's heuristic
    # Decode graphs: the split read from device memory (int32 [2]), at most decode_max_splits.
    decode_split_tensor: torch.Tensor | None = None
    decode_max_splits: int | None = None
    # The step's attention launches, prepared at the first layer and issued by every layer
    # (engine.model.PagedModel.attention): (launch, first row, end row) per kernel family.
    attention: list[tuple[PreparedAttention, int, int]] | None = None

    @property
    def num_chunks(self) -> int:
        return int(self.prefill_lens.shape[0])


def _tables(works: list[SeqWork]) -> np.ndarray:
    """[len(works), width] int32. The width (the kernels' row stride) is padded to a multiple of
    16: Triton compiles a new variant for a stride that is 1 or not a multiple of 16, and such
    compiles cost 1-2 s in the middle of a run."""
    width = max((len(w.pages) for w in works), default=0)
    table = np.zeros((len(works), -(-max(width, 1) // 16) * 16), dtype=np.int32)  # pad: page 0
    for i, w in enumerate(works):
        table[i, : len(w.pages)] = w.pages
    return table


def _aligned_upload(parts: list[np.ndarray], device) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One host-to-device copy of int32 arrays, each starting on a 16-byte boundary.

    Triton specialises a pointer argument on whether it is 16-byte aligned: views at arbitrary
    offsets into one buffer would compile new kernel variants as the batch mix changes (1-2 s
    stalls mid-run, seen on the H200)."""
    sizes = [p.size for p in parts]
    starts = np.concatenate([[0], np.cumsum([-(-n // 4) * 4 for n in sizes])])
    host = np.zeros(int(starts[-1]), dtype=np.int32)
    for p, a in zip(parts, starts, strict=False):
        host[a : a + p.size] = p
    dev = torch.from_numpy(host).to(device)
    return dev, [dev[a : a + n] for a, n in zip(starts, sizes, strict=False)]


def build_step(works: list[SeqWork], page_size: int, device: torch.device | str) -> StepInputs:
    order = [i for i, w in enumerate(works) if not w.is_prefill]
    order += [i for i, w in enumerate(works) if w.is_prefill]
    decodes = [works[i] for i in order if not works[i].is_prefill]
    chunks = [works[i] for i in order if works[i].is_prefill]
    ordered = decodes + chunks
    counts = np.array([len(w.tokens) for w in ordered], dtype=np.int64)
    assert all(len(w.tokens) == 1 for w in decodes), "a decode computes one token"
    ends = np.cumsum(counts)
    position_rows = [
        np.arange(w.context, w.context + len(w.tokens), dtype=np.int64) for w in ordered
    ]
    page_rows = [
        np.asarray(w.pages, dtype=np.int64)[p // page_size]
        for w, p in zip(ordered, position_rows, strict=True)
    ]
    positions = np.concatenate(position_rows or [np.zeros(0, dtype=np.int64)])
    pages = np.concatenate(page_rows or [np.zeros(0, dtype=np.int64)])
    last_row = np.empty(len(works), dtype=np.int64)
    last_row[order] = ends - 1
    longs = np.concatenate(
        [
            np.concatenate([np.asarray(w.tokens, dtype=np.int64) for w in ordered] or [pages]),
            positions,
            pages,
            positions % page_size,
            last_row,
        ]
    )
    t = int(counts.sum())
    dev_longs = torch.from_numpy(longs).to(device)
    decode_lens = np.array([w.context + 1 for w in decodes], dtype=np.int32)
    prefill_lens = np.array([w.context + len(w.tokens) for w in chunks], dtype=np.int32)
    prefill_cu = np.concatenate([[0], np.cumsum([len(w.tokens) for w in chunks])]).astype(np.int32)
    dt, pt = _tables(decodes), _tables(chunks)
    dev_ints, (dt_d, dl_d, pt_d, cu_d, pl_d) = _aligned_upload(
        [dt.ravel(), decode_lens, pt.ravel(), prefill_cu, prefill_lens], device
    )
    return StepInputs(
        num_tokens=t,
        num_decodes=len(decodes),
        input_ids=dev_longs[:t],
        positions=dev_longs[t : 2 * t],
        slot_pages=dev_longs[2 * t : 3 * t],
        slot_offsets=dev_longs[3 * t : 4 * t],
        logits_rows=dev_longs[4 * t :],
        decode_tables=dt_d.view(dt.shape),
        decode_lens=dl_d,
        decode_max_len=int(decode_lens.max()) if len(decodes) else 0,
        decode_total=int(decode_lens.sum()),
        prefill_tables=pt_d.view(pt.shape),
        prefill_cu=cu_d,
        prefill_lens=pl_d,
        prefill_q_lens=[len(w.tokens) for w in chunks],
        prefill_seq_lens=prefill_lens.tolist(),
    )
