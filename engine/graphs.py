"""CUDA graphs for decode-only steps: one graph per padded batch size, replayed with new inputs.

A decode-only step launches ~1,500 small kernels (32 layers x norms, rotary, GEMMs, KV writes,
attention); from Python that is milliseconds of launch time per step, as long as the GPU work
itself for small batches. A graph replays them with one launch.

Static inputs live in fixed device buffers; a step copies its rows in and pads the batch to the
next captured size with rows that decode one token on a scratch page (the pool's last page,
which sim never hands out).

The decode kernel's split count comes from device memory (kernels.paged_decode, `split_tensor`):
each step writes the (num_splits, tokens_per_split) the kernel's own heuristic picks for that
step's actual lengths (`decode_splits`: what the eager launcher, and the calibration, run), and
the graph's grid has room for them. A graph is captured per (padded batch size, split cap): the
caps are powers of two up to the most splits the heuristic can pick (`decode_split_bound`), a
step replays the smallest cap >= its split count, and programs past the written count exit at
once. Before, a graph per (batch, context bucket) baked the split the heuristic picks for a
batch of the bucket's length: 25 sequences of 12K ran 8% slower than the eager kernel.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.batch import SeqWork, StepInputs
from engine.model import PagedModel
from kernels.paged_decode import decode_split_bound, decode_splits

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class DecodeGraphs:
    def __init__(self, model: PagedModel, max_model_len: int, scratch_page: int):
        self.model = model
        page = model.pool.page_size
        self.width = -(-max_model_len // page)  # block-table columns
        self.max_len = self.width * page
        self.scratch = scratch_page
        dev = model.pool.k.device
        self.kv_heads = model.shard.num_kv_heads
        bound = decode_split_bound(1, self.max_len, self.kv_heads, dev)  # 1: the most splits
        self.split_caps = split_caps(bound)
        self.splits = torch.ones(2, dtype=torch.int32, device=dev)  # (num_splits, per split)
        b = BATCH_SIZES[-1]
        self.longs = torch.zeros((5, b), dtype=torch.int64, device=dev)  # ids, pos, page, slot, row
        self.longs[4] = torch.arange(b, device=dev)
        self.tables = torch.full((b, self.width), scratch_page, dtype=torch.int32, device=dev)
        self.lens = torch.ones(b, dtype=torch.int32, device=dev)
        # (padded batch, split cap) -> graph, its logits buffer, the inputs it captured
        self.graphs: dict[
            tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor, StepInputs]
        ] = {}
        self.mempool: tuple[int, int] | None = None  # torch.cuda.graph_pool_handle()
        self.longs[2].fill_(scratch_page)

    def _inputs(self, n: int, cap: int) -> StepInputs:
        """Static inputs of a batch of n whose decode kernel reads its split from `self.splits`
        (at most `cap` splits)."""
        empty = torch.zeros(0, dtype=torch.int32, device=self.lens.device)
        return StepInputs(
            num_tokens=n,
            num_decodes=n,
            input_ids=self.longs[0, :n],
            positions=self.longs[1, :n],
            slot_pages=self.longs[2, :n],
            slot_offsets=self.longs[3, :n],
            logits_rows=self.longs[4, :n],
            decode_tables=self.tables[:n],
            decode_lens=self.lens[:n],
            decode_max_len=self.max_len,
            decode_total=n * self.max_len,
            prefill_tables=empty.view(0, 1),
            prefill_cu=torch.zeros(1, dtype=torch.int32, device=self.lens.device),
            prefill_lens=empty,
            prefill_q_lens=[],
            prefill_seq_lens=[],
            decode_split_tensor=self.splits,
            decode_max_splits=cap,
        )

    def capture(self, sizes=BATCH_SIZES, caps=None) -> None:
        self.mempool = torch.cuda.graph_pool_handle()
        keys = [(n, cap) for n in sizes for cap in (caps or self.split_caps)]
        for n, cap in sorted(keys, reverse=True):  # largest first: the pool is reused
            self._write_splits(cap, -(-self.max_len // cap))  # any valid split: warm-up rows
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self.model.forward(self._inputs(n, cap))
            torch.cuda.current_stream().wait_stream(stream)
            # Fresh inputs: the step's attention launches are prepared inside the capture, so
            # their split workspaces come from the graph's pool; the step is kept with the
            # graph, which writes to those workspaces at every replay.
            step = self._inputs(n, cap)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.mempool):
                out = self.model.forward(step)
            self.graphs[(n, cap)] = (graph, out, step)

    def size_for(self, n: int) -> int | None:
        """The batch size a step of n decodes pads to (None: more than the largest)."""
        return next((b for b in BATCH_SIZES if b >= n), None)

    def cap_for(self, num_splits: int) -> int:
        """The smallest captured split cap >= num_splits (the heuristic never picks more than
        the last one, the bound)."""
        cap = next((c for c in self.split_caps if c >= num_splits), None)
        assert cap is not None, f"{num_splits} splits: above the bound {self.split_caps[-1]}"
        return cap

    def _write_splits(self, num_splits: int, tokens_per_split: int) -> None:
        self.splits.copy_(torch.tensor([num_splits, tokens_per_split], dtype=torch.int32))

    def run(self, works: list[SeqWork]) -> torch.Tensor:
        """Logits [len(works), vocab] of a decode-only step (every work one token)."""
        n, page = len(works), self.model.pool.page_size
        b = self.size_for(n)
        assert b is not None, f"{n} decodes: more than the largest batch, run eagerly"
        lengths = [w.context + 1 for w in works]
        num_splits, per_split = decode_splits(
            n, sum(lengths), max(lengths), self.kv_heads, self.splits.device
        )
        cap = self.cap_for(num_splits)
        host = np.zeros((4, b), dtype=np.int64)
        host[2] = self.scratch
        lens = np.ones(b, dtype=np.int32)
        width = max(len(w.pages) for w in works)
        tables = np.full((b, width), self.scratch, dtype=np.int32)
        for i, w in enumerate(works):
            host[0, i], host[1, i] = int(w.tokens[0]), w.context
            host[2, i], host[3, i] = w.pages[w.context // page], w.context % page
            lens[i] = w.context + 1
            tables[i, : len(w.pages)] = w.pages
        self.longs[:4, :b].copy_(torch.from_numpy(host))
        self.lens[:b].copy_(torch.from_numpy(lens))
        self.tables[:b, :width].copy_(torch.from_numpy(tables))
        self._write_splits(num_splits, per_split)
        if (b, cap) not in self.graphs:  # not captured (CPU): the same inputs, eagerly
            return self.model.forward(self._inputs(b, cap))[:n]
        graph, out, _ = self.graphs[(b, cap)]
        graph.replay()
        return out[:n]


def split_caps(bound: int) -> tuple[int, ...]:
    """Grid split dimensions: powers of two below the bound, then the bound."""
    caps, c = [], 1
    while c < bound:
        caps.append(c)
        c *= 2
    return (*caps, bound)
