"""Model shapes the kernels are measured for, as plain data (kernels/ imports nothing of ours:
it runs on the GPU machine with torch, triton and numpy alone). The simulator's presets
(sim/presets.py) hold the same numbers; tests/kernels/test_shapes.py keeps the two equal."""

from __future__ import annotations

MODEL_SHAPES: dict[str, dict[str, int]] = {
    # The article's 48-layer GQA model (the default cluster's).
    "article-70b": dict(
        num_layers=48,
        num_q_heads=64,
        num_kv_heads=8,
        head_dim=128,
        hidden_size=8192,
        intermediate_size=53248,
        vocab_size=128256,
        dtype_bytes=2,
    ),
    "llama-3-8b": dict(
        num_layers=32,
        num_q_heads=32,
        num_kv_heads=8,
        head_dim=128,
        hidden_size=4096,
        intermediate_size=14336,
        vocab_size=128256,
        dtype_bytes=2,
    ),
    "llama-3-70b": dict(
        num_layers=80,
        num_q_heads=64,
        num_kv_heads=8,
        head_dim=128,
        hidden_size=8192,
        intermediate_size=28672,
        vocab_size=128256,
        dtype_bytes=2,
    ),
}
