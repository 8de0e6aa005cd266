"""Chained page hashes over token ids, vectorised with numpy.

The key of full page k depends on the tokens of pages 0..k and on their positions, so equal keys
mean (up to a collision) equal prefixes. `hash_bits` truncates the key: the level-1 short hash of
the two-level index; narrow widths force collisions on purpose (the article's pitfall 1).
"""

from __future__ import annotations

import numpy as np

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: spreads every input bit over the whole word."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _token_weights(page_size: int) -> np.ndarray:
    return _mix(np.arange(1, page_size + 1, dtype=np.uint64) * _GOLDEN)


def page_keys(tokens: np.ndarray, page_size: int, hash_bits: int = 64) -> np.ndarray:
    """uint64 [num_full_pages]: chained key of every full page of `tokens` (a partial tail is not keyed)."""
    num_full = tokens.shape[0] // page_size
    if num_full == 0:
        return np.zeros(0, dtype=np.uint64)
    pages = tokens[: num_full * page_size].astype(np.uint64).reshape(num_full, page_size)
    with np.errstate(over="ignore"):
        content = _mix((pages * _token_weights(page_size)).sum(axis=1, dtype=np.uint64))
        positioned = _mix(content + np.arange(num_full, dtype=np.uint64) * _GOLDEN)
        chained = _mix(np.cumsum(positioned, dtype=np.uint64))
    if hash_bits < 64:
        chained &= np.uint64((1 << hash_bits) - 1)
    return chained
