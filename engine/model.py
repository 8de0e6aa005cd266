"""A Llama-style GQA decoder that runs one scheduler step over a mixed batch on a paged pool.

One `forward` per step: prefill chunks (n new tokens at positions c..c+n-1) and decodes (one
token each) go through the same GEMMs; each layer writes the new tokens' K/V into their pages,
then attention runs by the paged decode kernel on the decode rows and the paged prefill path on
the chunk rows. Only the last row of every sequence reaches the LM head.

Tensor parallelism (Megatron layout): QKV and gate/up are column parallel (a rank holds
num_heads / tp heads and intermediate / tp columns), O and down are row parallel and followed
by an all-reduce, the LM head is split over the vocabulary and its logits are all-gathered. The
KV pool of a rank holds its num_kv_heads / tp heads. With tp = 1 no collective runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.attention import paged_decode_attention, paged_prefill_attention, prefill_plan
from engine.batch import SeqWork, StepInputs, build_step
from engine.kv_pool import KVPool
from engine.layers import apply_rope, rms_norm, rope_cos_sin, swiglu_mlp
from engine.shape import ModelShape
from engine.weights import Weights


class PagedModel:
    def __init__(self, shape: ModelShape, weights: Weights, pool: KVPool, tp: int = 1, group=None):
        self.shape, self.weights, self.pool = shape, weights, pool
        self.shard = shape.shard(tp)
        self.tp, self.group = tp, group
        assert pool.k.shape[2] == self.shard.num_kv_heads, "pool holds this rank's KV heads"

    def _all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp > 1:
            torch.distributed.all_reduce(x, group=self.group)
        return x

    def prepare(self, works: list[SeqWork]) -> StepInputs:
        """Host metadata of one step, on the device (and the prefill kernel's work list)."""
        step = build_step(works, self.pool.page_size, self.pool.k.device)
        hkv = self.shard.num_kv_heads
        step.prefill_plan = prefill_plan(
            step.prefill_q_lens,
            step.prefill_seq_lens,
            hkv,
            self.shard.num_q_heads // hkv,
            self.pool.k.device,
        )
        return step

    @torch.inference_mode()
    def forward(self, step: StepInputs) -> torch.Tensor:
        """Logits [len(works), vocab] (bf16) of each sequence's last new token, in input order."""
        x = self.embed(step.input_ids)  # [T, hidden]: the residual stream
        q = self.pre_attention(0, x, step.positions, step.slot_pages, step.slot_offsets)
        for i in range(self.shape.num_layers):
            out = self.attention(i, q, step)
            x = self.post_attention(i, x, out)
            if i + 1 < self.shape.num_layers:
                q = self.pre_attention(i + 1, x, step.positions, step.slot_pages, step.slot_offsets)
        return self.head(x, step.logits_rows)

    # The step in segments. Everything but attention depends only on the token count and on
    # per-token device tensors, so engine/piecewise.py captures each stretch between two
    # attentions in a CUDA graph and runs attention (ragged, planned per step) eagerly.

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weights.embed)

    def pre_attention(
        self,
        i: int,
        x: torch.Tensor,
        positions: torch.Tensor,
        slot_pages: torch.Tensor,
        slot_offsets: torch.Tensor,
    ) -> torch.Tensor:
        """Layer i's attention input: norm, QKV, rotary; writes the new tokens' K/V into the
        pool. Returns q [T, H_q, D]."""
        s, w = self.shape, self.weights.layers[i]
        d, hq, hkv = s.head_dim, self.shard.num_q_heads, self.shard.num_kv_heads
        qkv = F.linear(rms_norm(x, w.attn_norm, s.rms_eps), w.wqkv)  # [T, (hq + 2 hkv) * d]
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        cos, sin = rope_cos_sin(positions, d, s.rope_theta)
        q = apply_rope(q.view(-1, hq, d), cos, sin)
        k = apply_rope(k.view(-1, hkv, d), cos, sin)
        self.pool.write(i, k, v.view(-1, hkv, d), slot_pages, slot_offsets)
        return q

    def post_attention(self, i: int, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """The residual stream after layer i: O projection, MLP, both residual adds."""
        s, w = self.shape, self.weights.layers[i]
        x = x + self._all_reduce(F.linear(attn.view(x.shape[0], -1), w.wo))
        h = rms_norm(x, w.mlp_norm, s.rms_eps)
        return x + self._all_reduce(swiglu_mlp(h, w.w_gate_up, w.w_down))

    def head(self, x: torch.Tensor, logits_rows: torch.Tensor) -> torch.Tensor:
        last = rms_norm(x[logits_rows], self.weights.final_norm, self.shape.rms_eps)
        return self._gather_vocab(F.linear(last, self.weights.lm_head))

    def attention(
        self, i: int, q: torch.Tensor, step: StepInputs, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Layer i's attention of the step's rows of q: decodes by the paged decode kernel,
        prefill chunks by the paged prefill kernel. Rows of q past step.num_tokens (padding of
        a graphed step) are left alone."""
        k_pool, v_pool = self.pool.layer(i)
        out = torch.empty_like(q) if out is None else out  # [T, hq, d]
        nd, nt = step.num_decodes, step.num_tokens
        if nd:
            paged_decode_attention(
                q[:nd],
                k_pool,
                v_pool,
                step.decode_tables,
                step.decode_lens,
                out=out[:nd],
                max_seq_len=step.decode_max_len,
                total_tokens=step.decode_total,
                num_splits=step.decode_num_splits,
                check_bounds=False,
            )
        if nt > nd:
            paged_prefill_attention(
                q[nd:nt],
                k_pool,
                v_pool,
                step.prefill_tables,
                step.prefill_lens,
                step.prefill_cu,
                out=out[nd:nt],
                plan=step.prefill_plan,
                check_bounds=False,
            )
        return out

    def _gather_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        if self.tp == 1:
            return logits
        parts = [torch.empty_like(logits) for _ in range(self.tp)]
        torch.distributed.all_gather(parts, logits.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Next token ids [rows] int64: argmax over the vocabulary (EOS is not special)."""
    return logits.argmax(dim=-1)
