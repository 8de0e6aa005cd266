"""Deterministic token ids: the same seed and key always give the same tokens.

`block_tokens` is a counter-based hash (splitmix64 of key and position), so a trace's block id
becomes the same tokens wherever and whenever it is built, without storing any of them: a prompt of
B blocks is built from its B ids in one vectorised call, and token j of block `key` does not depend
on the block's length (a partial last block is a prefix of the full one).
"""

from __future__ import annotations

import numpy as np

from sim.kv.hashing import mix64  # splitmix64: one definition for keys and tokens

VOCAB_SIZE = 128256  # Llama-3 tokenizer size; ids are drawn below it

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_POSITION = np.uint64(0xD1B54A32D192ED03)


def random_tokens(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, VOCAB_SIZE, size=n, dtype=np.int32)


class TokenStream:
    """`random_tokens(rng, n)` for successive n, drawn `chunk` tokens at a time: the same ids
    (numpy draws bounded int32s one after another from the bit generator, whose spare half word
    carries over between calls, so one call of n1 + n2 equals a call of n1 then one of n2) as
    long as nothing else draws from `rng` meanwhile. A call per request cost ~25 us in numpy's
    argument handling alone."""

    def __init__(self, rng: np.random.Generator, chunk: int = 1 << 16):
        self.rng = rng
        self.chunk = chunk
        self._buffer = np.zeros(0, dtype=np.int32)
        self._next = 0  # the first unused id in _buffer

    def take(self, n: int) -> np.ndarray:
        """int32 [n], its own copy."""
        buffer, start = self._buffer, self._next
        if start + n > buffer.shape[0]:
            fresh = random_tokens(self.rng, max(self.chunk, n))
            buffer = self._buffer = np.concatenate([buffer[start:], fresh])
            start = 0
        self._next = start + n
        return buffer[start : start + n].copy()


def block_tokens(keys: np.ndarray, n: int, salt: int = 0) -> np.ndarray:
    """int32 [len(keys), n]: the n tokens of each block key; row i depends only on (keys[i], salt)."""
    keys = np.asarray(keys, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        seed = mix64(keys * _GOLDEN + mix64(np.uint64(salt) + _GOLDEN))
        x = mix64(seed[:, None] + np.arange(1, n + 1, dtype=np.uint64) * _POSITION)
    # The high 32 bits are the best mixed; the modulo bias over 2**32 is below 3e-5.
    return ((x >> np.uint64(32)) % np.uint64(VOCAB_SIZE)).astype(np.int32)


def keyed_tokens(key: int, n: int, salt: int = 0) -> np.ndarray:
    """Tokens that depend only on (key, salt): a trace block id always maps to the same text."""
    return block_tokens(np.array([key]), n, salt)[0]


def blocks_prompt(keys: np.ndarray, num_tokens: int, block_size: int, salt: int = 0) -> np.ndarray:
    """int32 [num_tokens]: blocks `keys` laid end to end, the last one cut to fit num_tokens."""
    return block_tokens(keys, block_size, salt).reshape(-1)[:num_tokens]
