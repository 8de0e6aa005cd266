"""Model shape as plain data, so engine/ runs where pydantic is not installed."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from kernels.shapes import MODEL_SHAPES


@dataclass(frozen=True, slots=True)
class ModelShape:
    num_layers: int
    hidden_size: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float = 500_000.0  # Llama 3's base
    rms_eps: float = 1e-5

    def __post_init__(self) -> None:
        assert self.num_q_heads % self.num_kv_heads == 0, "GQA: q heads per KV head"

    @classmethod
    def from_model_config(cls, model) -> ModelShape:
        """From sim.config.ModelConfig (or anything with its field names)."""
        return cls(
            num_layers=model.num_layers,
            hidden_size=model.hidden_size,
            num_q_heads=model.num_q_heads,
            num_kv_heads=model.num_kv_heads,
            head_dim=model.head_dim,
            intermediate_size=model.intermediate_size,
            vocab_size=model.vocab_size,
        )

    def shard(self, tp: int) -> ShardShape:
        """Per-rank sizes under tensor parallelism (heads, MLP width and vocab split by `tp`)."""
        for name, n in (
            ("num_kv_heads", self.num_kv_heads),
            ("num_q_heads", self.num_q_heads),
            ("intermediate_size", self.intermediate_size),
            ("vocab_size", self.vocab_size),
        ):
            assert n % tp == 0, f"{name}={n} is not divisible by tp={tp}"
        return ShardShape(
            tp=tp,
            num_q_heads=self.num_q_heads // tp,
            num_kv_heads=self.num_kv_heads // tp,
            intermediate_size=self.intermediate_size // tp,
            vocab_size=self.vocab_size // tp,
        )


@dataclass(frozen=True, slots=True)
class ShardShape:
    tp: int
    num_q_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int


# Small shapes for CPU tests (interpreter) and the presets the GPU runs use.
TINY = ModelShape(
    num_layers=2,
    hidden_size=64,
    num_q_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    vocab_size=128,
)
# The kernels' plain-data presets (kernels/shapes.py, kept equal to sim's by a test).
LLAMA_3_8B = ModelShape.from_model_config(SimpleNamespace(**MODEL_SHAPES["llama-3-8b"]))
