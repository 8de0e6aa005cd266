"""Piecewise CUDA graphs for steps that carry a prefill chunk (mixed steps).

A mixed step's attention is ragged (chunks of any length over any context, planned per step on
the host), but everything between two attentions -- the O projection, MLP, norms, residual
adds, the next layer's QKV, rotary and KV write -- depends only on the token count and on
per-token device tensors. So for each captured token count T (a bucket), the stretch from one
attention to the next is one CUDA graph, and the step runs: graph 0 (embedding + layer 0 up to
attention), attention 0 (eager), graph 1, attention 1, ..., graph L (the last layer's tail),
then the LM head on the sequences' last rows (eager: its row count is the number of sequences,
not T). That is vLLM's piecewise scheme; it turns ~45 Python launches per layer into two or
three.

Padding: a step of n tokens runs the smallest bucket >= n. The padded rows' positions are 0
and their K/V go to a scratch page (the pool's last page, which sim never hands out);
attention skips them (it reads rows < n only) and nothing mixes rows outside attention, so they
change no real row. Their GEMM rows are real work: buckets are spaced finely (multiples of 16
to 256, of 32 to 512) where GEMMs are weight-bound, and steps above the largest bucket run
eagerly, where the GPU work outlasts the launches anyway.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from engine.batch import StepInputs
from engine.model import PagedModel

BUCKETS = (1, 2, 4, 8, *range(16, 257, 16), *range(288, 513, 32))


class MixedGraphs:
    def __init__(self, model: PagedModel, scratch_page: int, buckets=BUCKETS):
        self.model, self.buckets = model, tuple(sorted(buckets))
        s, sh = model.shape, model.shard
        dev, dtype = model.pool.k.device, model.weights.embed.dtype
        t = self.buckets[-1]
        # Static inputs and the tensors that cross from a graph to attention and back.
        self.ids = torch.zeros(t, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(t, dtype=torch.int64, device=dev)
        self.slot_pages = torch.full((t,), scratch_page, dtype=torch.int64, device=dev)
        self.slot_offsets = torch.zeros(t, dtype=torch.int64, device=dev)
        self.x = torch.zeros((t, s.hidden_size), dtype=dtype, device=dev)
        self.h = torch.zeros_like(self.x)  # the normed input of the next layer (or the head)
        self.cos = torch.zeros((t, s.head_dim // 2), dtype=torch.float32, device=dev)
        self.sin = torch.zeros_like(self.cos)
        self.q = torch.zeros((t, sh.num_q_heads, s.head_dim), dtype=dtype, device=dev)
        self.attn = torch.zeros_like(self.q)
        self.scratch = scratch_page
        # bucket -> one callable per segment (graph replays; on CPU the segments themselves)
        self.segments: dict[int, list[Callable[[], None]]] = {}
        self.mempool: tuple[int, int] | None = None  # torch.cuda.graph_pool_handle()

    def bucket_for(self, n: int) -> int | None:
        """The captured token count a step of n tokens pads to (None: run it eagerly)."""
        return next((b for b in self.buckets if b >= n), None)

    def _segment_fns(self, t: int) -> list[Callable[[], None]]:
        """The L + 1 stretches between attentions, each reading and writing static buffers."""
        m, num_layers = self.model, self.model.shape.num_layers
        x, h, q, attn = self.x[:t], self.h[:t], self.q[:t], self.attn[:t]
        cos, sin = self.cos[:t], self.sin[:t]
        per_token = (self.positions[:t], self.slot_pages[:t], self.slot_offsets[:t])

        def first() -> None:
            x.copy_(m.embed(self.ids[:t]))
            h.copy_(m.first_norm(x))
            c, s = m.rotary(self.positions[:t])
            cos.copy_(c)
            sin.copy_(s)
            q.copy_(m.pre_attention(0, h, cos, sin, *per_token))

        def between(i: int) -> Callable[[], None]:  # layer i's tail, then layer i + 1's head
            def run() -> None:
                h.copy_(m.post_attention(i, x, attn))  # x: updated in place
                if i + 1 < num_layers:
                    q.copy_(m.pre_attention(i + 1, h, cos, sin, *per_token))

            return run

        return [first] + [between(i) for i in range(num_layers)]

    def capture(self) -> None:
        self.mempool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        for t in sorted(self.buckets, reverse=True):  # largest first: the pool is reused
            replays = []
            for fn in self._segment_fns(t):
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream), torch.inference_mode():
                    fn()  # warm-up outside the graph (cuBLAS workspaces, Triton compiles)
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self.mempool), torch.inference_mode():
                    fn()
                replays.append(graph.replay)
            self.segments[t] = replays

    @torch.inference_mode()
    def run(self, step: StepInputs) -> torch.Tensor:
        """Logits [len(works), vocab] of a step of at most max(buckets) tokens."""
        n = step.num_tokens
        t = self.bucket_for(n)
        assert t is not None, f"{n} tokens: above the largest bucket, run eagerly"
        self.ids[:n].copy_(step.input_ids)
        self.positions[:n].copy_(step.positions)
        self.slot_pages[:n].copy_(step.slot_pages)
        self.slot_offsets[:n].copy_(step.slot_offsets)
        if t > n:  # padding rows: position 0, K/V on the scratch page
            self.positions[n:t].zero_()
            self.slot_pages[n:t].fill_(self.scratch)
        segments = self.segments.get(t) or self._segment_fns(t)  # not captured: run eagerly
        segments[0]()
        for i in range(self.model.shape.num_layers):
            self.model.attention(i, self.q[:t], step, out=self.attn[:t])
            segments[i + 1]()
        return self.model.head(self.h[:t], step.logits_rows)
