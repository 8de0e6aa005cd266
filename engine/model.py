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

from engine.attention import prefill_plan
from engine.batch import SeqWork, StepInputs, build_step
from engine.kv_pool import KVPool
from engine.layers import (
    add_rms_norm,
    rms_norm_fused,
    rope_cos_sin,
    rope_write_kv,
    swiglu_mlp_fused,
)
from engine.shape import ModelShape
from engine.weights import Weights
from kernels.paged_decode import PreparedAttention, prepare_decode
from kernels.paged_prefill import prepare_prefill


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
        x = self.embed(step.input_ids)  # [T, hidden]: the residual stream, updated in place
        h = self.first_norm(x)
        cos, sin = self.rotary(step.positions)
        for i in range(self.shape.num_layers):
            q = self.pre_attention(
                i, h, cos, sin, step.positions, step.slot_pages, step.slot_offsets
            )
            h = self.post_attention(i, x, self.attention(i, q, step))
        return self.head(h, step.logits_rows)

    # The step in segments. Everything but attention depends only on the token count and on
    # per-token device tensors, so engine/piecewise.py captures each stretch between two
    # attentions in a CUDA graph and runs attention (ragged, planned per step) eagerly. The
    # elementwise work runs fused (kernels/fused.py through engine.layers): a residual add and
    # the next norm are one kernel, rotary and the KV write another, silu * up a third.

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weights.embed)

    def first_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm_fused(x, self.weights.layers[0].attn_norm, self.shape.rms_eps)

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rope_cos_sin(positions, self.shape.head_dim, self.shape.rope_theta)

    def pre_attention(
        self,
        i: int,
        h: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        positions: torch.Tensor,
        slot_pages: torch.Tensor,
        slot_offsets: torch.Tensor,
    ) -> torch.Tensor:
        """Layer i's attention input from its normed input h: QKV, rotary; writes the new
        tokens' K/V into the pool. Returns q [T, H_q, D]."""
        s, w = self.shape, self.weights.layers[i]
        k_pool, v_pool = self.pool.layer(i)
        return rope_write_kv(
            F.linear(h, w.wqkv),
            cos,
            sin,
            positions,
            k_pool,
            v_pool,
            slot_pages,
            slot_offsets,
            self.shard.num_q_heads,
            self.shard.num_kv_heads,
            s.head_dim,
            s.rope_theta,
        )

    def post_attention(self, i: int, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Layer i's O projection and MLP with both residual adds (x is updated in place).
        Returns the next layer's normed input (after the last layer: the final norm)."""
        s, layers = self.shape, self.weights.layers
        w = layers[i]
        o = self._all_reduce(F.linear(attn.view(x.shape[0], -1), w.wo))
        h, _ = add_rms_norm(o, x, w.mlp_norm, s.rms_eps)
        mlp = self._all_reduce(swiglu_mlp_fused(h, w.w_gate_up, w.w_down))
        last = i + 1 == len(layers)
        nxt = self.weights.final_norm if last else layers[i + 1].attn_norm
        h, _ = add_rms_norm(mlp, x, nxt, s.rms_eps)
        return h

    def head(self, h: torch.Tensor, logits_rows: torch.Tensor) -> torch.Tensor:
        """Logits of the rows `logits_rows` of the final norm's output h."""
        return self._gather_vocab(F.linear(h[logits_rows], self.weights.lm_head))

    def attention(
        self, i: int, q: torch.Tensor, step: StepInputs, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Layer i's attention of the step's rows of q: decodes by the paged decode kernel,
        prefill chunks by the paged prefill kernel. Rows of q past step.num_tokens (padding of
        a graphed step) are left alone.

        The launches are prepared once per step, at its first layer (validation, split choice,
        workspaces, constant arguments), and every layer issues them with its own K/V views:
        the wrappers did all of that per layer, ~0.2 ms of host time each, which made a step
        with a prefill chunk host-bound (the piecewise graphs issue attention eagerly)."""
        k_pool, v_pool = self.pool.layer(i)
        out = torch.empty_like(q) if out is None else out  # [T, hq, d]
        if step.attention is None:
            step.attention = self.prepare_attention(step, q, out, k_pool, v_pool)
        for launch, a, b in step.attention:
            launch(k_pool, v_pool, q=q[a:b], out=out[a:b])
        return out

    def prepare_attention(
        self,
        step: StepInputs,
        q: torch.Tensor,
        out: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
    ) -> list[tuple[PreparedAttention, int, int]]:
        """The step's attention launches: the decode rows [0, nd), the chunk rows [nd, nt)."""
        nd, nt = step.num_decodes, step.num_tokens
        launches: list[tuple[PreparedAttention, int, int]] = []
        if nd:
            decode = prepare_decode(
                q[:nd],
                k_pool,
                v_pool,
                step.decode_tables,
                step.decode_lens,
                out=out[:nd],
                check_bounds=False,
                **decode_split_args(step),
            )
            launches.append((decode, 0, nd))
        if nt > nd:
            prefill = prepare_prefill(
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
            launches.append((prefill, nd, nt))
        return launches

    def _gather_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        if self.tp == 1:
            return logits
        parts = [torch.empty_like(logits) for _ in range(self.tp)]
        torch.distributed.all_gather(parts, logits.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)


def decode_split_args(step: StepInputs) -> dict:
    """How the decode kernel splits: from device memory (a decode graph), forced, or its own
    heuristic on the step's host-side lengths."""
    if step.decode_split_tensor is not None:
        return {"split_tensor": step.decode_split_tensor, "max_splits": step.decode_max_splits}
    return {
        "num_splits": step.decode_num_splits,
        "max_seq_len": step.decode_max_len,
        "total_tokens": step.decode_total,
    }


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Next token ids [rows] int64: argmax over the vocabulary (EOS is not special)."""
    return logits.argmax(dim=-1)
