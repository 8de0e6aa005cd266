"""Deterministic token ids: the same seed and key always give the same tokens.

`block_tokens` is a counter-based hash (splitmix64 of key and position), so a trace's block id
becomes the same tokens wherever and whenever it is built, without storing any of them: a prompt of
B blocks is built from its B ids in one vectorised call, and token j of block `key` does not depend
on the block's length (a partial last block is a prefix of the full one).
"""

from __future__ import annotations

from bisect import bisect_right

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
    argument handling alone.

    `reserve(n)` hands out the next n ids without drawing them, `ids` draws them when read
    (`take` is both): a trace's prompts are drawn only if something reads them, and the ids of
    a stretch read later are the ones read at once, drawn in the stream's order (nothing else
    draws from a workload's own rng). A chunk is kept until every id reserved in it was read."""

    def __init__(self, rng: np.random.Generator, chunk: int = 1 << 16):
        self.rng = rng
        self.chunk = chunk
        self._reserved = 0  # ids handed out (reserve)
        self._drawn = 0  # ids drawn
        self._chunks: dict[int, np.ndarray] = {}  # chunks drawn and still read, by first id
        self._unread: dict[int, int] = {}  # ... their ids reserved and not read yet
        self._starts: list[int] = []  # first id of each chunk drawn, in order

    def take(self, n: int) -> np.ndarray:
        """int32 [n], its own copy."""
        return self.ids(self.reserve(n), n)

    def reserve(self, n: int) -> int:
        """The next n ids, not drawn yet: their first id (read them with `ids`)."""
        start = self._reserved
        self._reserved = start + n
        return start

    def ids(self, start: int, n: int) -> np.ndarray:
        """int32 [n]: the reserved ids start .. start + n - 1 (each stretch read once), a copy."""
        while self._drawn < start + n:  # draw on, in order
            size = max(self.chunk, start + n - self._drawn)
            first = self._drawn
            self._chunks[first] = random_tokens(self.rng, size)
            self._unread[first] = size
            self._starts.append(first)
            self._drawn = first + size
        out = np.empty(n, dtype=np.int32)
        at = bisect_right(self._starts, start) - 1
        done = 0
        while done < n:
            first = self._starts[at]
            chunk = self._chunks[first]
            lo = start + done - first
            take = min(n - done, chunk.shape[0] - lo)
            out[done : done + take] = chunk[lo : lo + take]
            done += take
            self._unread[first] -= take
            if not self._unread[first]:  # every id in it was read: drop it
                del self._chunks[first], self._unread[first]
            at += 1
        return out


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
