"""Random bf16 weights generated on the device from a seed (nothing is downloaded).

Each full tensor is drawn from its own generator, seeded by (seed, layer, tensor), and a
tensor-parallel rank keeps its slice: every TP degree sees the same model, so a TP-2 run can
be checked against the unsharded reference. Scales keep activations near unit variance
(std 1/sqrt(fan_in) for linears), so attention and softmax see realistic ranges.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.shape import ModelShape

_EMBED, _FINAL_NORM, _LM_HEAD = 0, 1, 2
_ATTN_NORM, _WQ, _WK, _WV, _WO, _MLP_NORM, _W_GATE, _W_UP, _W_DOWN = range(9)


@dataclass(slots=True)
class LayerWeights:
    attn_norm: torch.Tensor  # [hidden]
    wqkv: torch.Tensor  # [(q_heads + 2 kv_heads) * head_dim / tp, hidden]: column parallel
    wo: torch.Tensor  # [hidden, q_heads * head_dim / tp]: row parallel
    mlp_norm: torch.Tensor  # [hidden]
    w_gate_up: torch.Tensor  # [2 * intermediate / tp, hidden]: column parallel
    w_down: torch.Tensor  # [hidden, intermediate / tp]: row parallel


@dataclass(slots=True)
class Weights:
    embed: torch.Tensor  # [vocab, hidden], replicated on every rank
    layers: list[LayerWeights]
    final_norm: torch.Tensor  # [hidden]
    lm_head: torch.Tensor  # [vocab / tp, hidden]: column parallel (logits gathered)


def _draw(shape, seed: int, layer: int, tensor: int, std: float, device, dtype) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed((seed << 24) ^ ((layer + 1) << 8) ^ tensor)
    return torch.randn(shape, generator=g, device=device, dtype=dtype).mul_(std)


def _norm_weight(hidden: int, seed: int, layer: int, tensor: int, device, dtype) -> torch.Tensor:
    # Not all ones, so a norm applied with the wrong weight shows up in the logits.
    return _draw((hidden,), seed, layer, tensor, 0.1, device, dtype).add_(1.0)


def _rows(w: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    n = w.shape[0] // tp
    # clone: a view would keep the whole tensor's storage alive on every rank
    return w[rank * n : (rank + 1) * n].clone() if tp > 1 else w


def _cols(w: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    n = w.shape[1] // tp
    return w[:, rank * n : (rank + 1) * n].contiguous()


def _layer(shape: ModelShape, seed: int, i: int, rank: int, tp: int, device, dtype):
    h, d, inter = shape.hidden_size, shape.head_dim, shape.intermediate_size
    s_in, s_inter = h**-0.5, inter**-0.5

    def draw(rows: int, cols: int, tensor: int, std: float) -> torch.Tensor:
        return _draw((rows, cols), seed, i, tensor, std, device, dtype)

    wq = _rows(draw(shape.num_q_heads * d, h, _WQ, s_in), rank, tp)
    wk = _rows(draw(shape.num_kv_heads * d, h, _WK, s_in), rank, tp)
    wv = _rows(draw(shape.num_kv_heads * d, h, _WV, s_in), rank, tp)
    gate = _rows(draw(inter, h, _W_GATE, s_in), rank, tp)
    up = _rows(draw(inter, h, _W_UP, s_in), rank, tp)
    return LayerWeights(
        attn_norm=_norm_weight(h, seed, i, _ATTN_NORM, device, dtype),
        wqkv=torch.cat([wq, wk, wv]),
        wo=_cols(draw(h, shape.num_q_heads * d, _WO, (shape.num_q_heads * d) ** -0.5), rank, tp),
        mlp_norm=_norm_weight(h, seed, i, _MLP_NORM, device, dtype),
        w_gate_up=torch.cat([gate, up]),
        w_down=_cols(draw(h, inter, _W_DOWN, s_inter), rank, tp),
    )


def random_weights(
    shape: ModelShape,
    seed: int,
    device: torch.device | str,
    *,
    rank: int = 0,
    tp: int = 1,
    dtype: torch.dtype = torch.bfloat16,
) -> Weights:
    """The model's weights (this rank's shard of them), drawn on `device`."""
    shape.shard(tp)  # checks divisibility
    h, v = shape.hidden_size, shape.vocab_size
    top = -1  # layer index of the tensors outside the decoder stack
    return Weights(
        embed=_draw((v, h), seed, top, _EMBED, 1.0, device, dtype),
        layers=[_layer(shape, seed, i, rank, tp, device, dtype) for i in range(shape.num_layers)],
        final_norm=_norm_weight(h, seed, top, _FINAL_NORM, device, dtype),
        lm_head=_rows(_draw((v, h), seed, top, _LM_HEAD, h**-0.5, device, dtype), rank, tp),
    )
