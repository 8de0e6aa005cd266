"""Deterministic token ids: the same seed and key always give the same tokens."""

from __future__ import annotations

import numpy as np

VOCAB_SIZE = 128256  # Llama-3 tokenizer size; ids are drawn below it


def random_tokens(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, VOCAB_SIZE, size=n, dtype=np.int32)


def keyed_tokens(key: int, n: int, salt: int = 0) -> np.ndarray:
    """Tokens that depend only on (key, salt): a trace block id always maps to the same text."""
    return np.random.default_rng([salt, key]).integers(0, VOCAB_SIZE, size=n, dtype=np.int32)
