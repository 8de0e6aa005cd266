"""Model and GPU presets (nanoGPT style: a dict of shapes, units in the names)."""

# The article's model: 48 layers, GQA with 8 KV heads, head_dim 128, BF16, "70B-class".
# 64 query heads x 128 = hidden 8192; the MLP width 53248 brings the parameter count to ~70B
# (the article gives no MLP width; this is our documented choice).
MODEL_PRESETS: dict[str, dict] = {
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

# GPU datasheet leads. hbm_bytes_per_s is the measured device-to-device copy ceiling class
# (4.3 TB/s, below the 4.8 TB/s datasheet figure); bf16 ~790 TFLOP/s is the dense matmul rate
# measured on random data (the datasheet says ~990). Both are the roofline's ceilings until a
# calibration file replaces them with measured tables.
GPU_PRESETS: dict[str, dict] = {
    "h200": dict(
        hbm_bytes=141e9,
        hbm_bytes_per_s=4.3e12,
        bf16_flops_per_s=790e12,
        interconnect_bytes_per_s=450e9,
        calibration="h200.json",
        # Per-step overhead outside the priced kernels (issue 15): the real engine (engine/)
        # measures it; put its value here with the source (file, date, command), e.g.
        # step_overhead_s=2.0e-3, step_overhead_source="engine/bench ... H200, 2026-12-..".
        step_overhead_s=0.0,
        step_overhead_source="not measured",
    ),
    "h100": dict(
        hbm_bytes=80e9,
        hbm_bytes_per_s=3.0e12,
        bf16_flops_per_s=790e12,
        interconnect_bytes_per_s=450e9,
        calibration=None,
    ),
}
