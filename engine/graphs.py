"""CUDA graphs for decode-only steps: one graph per padded batch size, replayed with new inputs.

A decode-only step launches ~1,500 small kernels (32 layers x norms, rotary, GEMMs, KV writes,
attention); from Python that is milliseconds of launch time per step, as long as the GPU work
itself for small batches. A graph replays them with one launch.

Static inputs live in fixed device buffers; a step copies its rows in and pads the batch to the
next captured size with rows that decode one token on a scratch page (the pool's last page,
which sim never hands out).

The decode kernel's split count is fixed at capture, so a graph is captured per (padded batch
size, context bucket): the bucket is the longest sequence rounded up to a power of two (from
1K; the last one is max_model_len), and the split count is the one the kernel's own heuristic
(`choose_split`) picks for that many sequences of the bucket's length. Shorter sequences of the
batch run fewer splits (splits past a sequence's end exit at once). One bucket for every
length, as before, gave a batch of 16 at 2K context one split per sequence (128 programs on
132 SMs) where the eager kernel runs four.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.batch import SeqWork, StepInputs
from engine.model import PagedModel

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
FIRST_LEN_BUCKET = 1024


class DecodeGraphs:
    def __init__(self, model: PagedModel, max_model_len: int, scratch_page: int):
        self.model = model
        page = model.pool.page_size
        self.width = -(-max_model_len // page)  # block-table columns
        self.max_len = self.width * page
        self.len_buckets = length_buckets(self.max_len)
        self.scratch = scratch_page
        dev = model.pool.k.device
        b = BATCH_SIZES[-1]
        self.longs = torch.zeros((5, b), dtype=torch.int64, device=dev)  # ids, pos, page, slot, row
        self.longs[4] = torch.arange(b, device=dev)
        self.tables = torch.full((b, self.width), scratch_page, dtype=torch.int32, device=dev)
        self.lens = torch.ones(b, dtype=torch.int32, device=dev)
        # (padded batch, context bucket) -> graph and its logits buffer
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.mempool: tuple[int, int] | None = None  # torch.cuda.graph_pool_handle()
        self.longs[2].fill_(scratch_page)

    def _inputs(self, n: int, max_len: int) -> StepInputs:
        """Static inputs of a batch of n; the decode kernel splits as for n sequences of
        max_len tokens (num_splits None: its heuristic, from max_len and the total)."""
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
            decode_max_len=max_len,
            decode_total=n * max_len,
            prefill_tables=empty.view(0, 1),
            prefill_cu=torch.zeros(1, dtype=torch.int32, device=self.lens.device),
            prefill_lens=empty,
            prefill_q_lens=[],
            prefill_seq_lens=[],
            decode_num_splits=None,
        )

    def capture(self, sizes=BATCH_SIZES, lens=None) -> None:
        self.mempool = torch.cuda.graph_pool_handle()
        keys = [(n, ln) for n in sizes for ln in (lens or self.len_buckets)]
        for n, ln in sorted(keys, reverse=True):  # largest first: the pool is reused
            step = self._inputs(n, ln)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self.model.forward(step)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.mempool):
                out = self.model.forward(step)
            self.graphs[(n, ln)] = (graph, out)

    def size_for(self, n: int) -> int | None:
        """The batch size a step of n decodes pads to (None: more than the largest)."""
        return next((b for b in BATCH_SIZES if b >= n), None)

    def len_for(self, max_len: int) -> int:
        return next(b for b in self.len_buckets if b >= max_len)

    def run(self, works: list[SeqWork]) -> torch.Tensor:
        """Logits [len(works), vocab] of a decode-only step (every work one token)."""
        n, page = len(works), self.model.pool.page_size
        b = self.size_for(n)
        assert b is not None, f"{n} decodes: more than the largest batch, run eagerly"
        bucket = self.len_for(max(w.context + 1 for w in works))
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
        if (b, bucket) not in self.graphs:  # not captured (CPU): the same inputs, eagerly
            return self.model.forward(self._inputs(b, bucket))[:n]
        graph, out = self.graphs[(b, bucket)]
        graph.replay()
        return out[:n]


def length_buckets(max_len: int) -> tuple[int, ...]:
    """Context buckets: powers of two from FIRST_LEN_BUCKET below max_len, then max_len."""
    buckets, b = [], FIRST_LEN_BUCKET
    while b < max_len:
        buckets.append(b)
        b *= 2
    return (*buckets, max_len)
