"""Chained page keys over token ids, vectorised with numpy: the level-1 hash of the prefix index.

Key of full page k = mix(h_0 + h_1 + ... + h_k) with h_i = mix(content_i + i * GOLDEN) and
content_i = sum_j tokens[i, j] * w_j (mod 2**64). Every w_j is odd, so it is invertible modulo
2**64 and any change of a single token changes content_i; mix (splitmix64's finaliser) is a
bijection, so it changes h_i, the running sum and every key from page i on. Hence equal 64-bit
keys mean equal prefixes up to an accidental collision of two or more changes (~2**-64), and a
page's key depends on its position and on every page before it (the chain).

The keys are prefix-stable (the keys of a prompt's first n pages do not depend on what follows),
so a conversation that grows keeps its earlier keys: the incremental maintenance the article asks
for costs nothing more. `hash_bits` keeps the low bits only: the short level-1 hash. Narrow widths
force collisions on purpose (the article's pitfall 1); level 2 (exact tokens) must catch them.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

from sim import native

UInt64 = TypeVar("UInt64", np.ndarray, np.uint64)  # an array of uint64 or one

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_WEIGHTS: dict[int, np.ndarray] = {}  # page_size -> odd token weights (pure function of page_size)
# The page loop in C (sim/_pagekeys.c) when the native build is in use: the same keys, bit for
# bit, without numpy's ~25 calls a prompt (a generated page is hashed one page at a time).
_C = native.c_extension("sim._pagekeys")
_C_TOKENS = (np.dtype(np.int32), np.dtype(np.int64))


def mix64(x: UInt64) -> UInt64:
    """splitmix64 finaliser: a bijection of uint64 that spreads every input bit over the word."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _token_weights(page_size: int) -> np.ndarray:
    """uint64 [page_size]: one odd (invertible mod 2**64) weight per token position in a page."""
    w = _WEIGHTS.get(page_size)
    if w is None:
        with np.errstate(over="ignore"):
            w = mix64(np.arange(1, page_size + 1, dtype=np.uint64) * _GOLDEN) | np.uint64(1)
        _WEIGHTS[page_size] = w
    return w


def page_keys(tokens: np.ndarray, page_size: int, hash_bits: int = 64) -> np.ndarray:
    """uint64 [num_full_pages]: chained key of every full page of `tokens` (a partial tail is not keyed)."""
    return chained_page_keys(tokens, page_size, hash_bits)[0]


def chained_page_keys(
    tokens: np.ndarray, page_size: int, hash_bits: int = 64, first_page: int = 0, carry: int = 0
) -> tuple[np.ndarray, int]:
    """(uint64 keys of the full pages first_page, first_page + 1, ... of `tokens`, the chain's
    carry after the last). The carry is the running sum h_0 + ... + h_k the keys mix (before
    the `hash_bits` mask): a call from first_page with the carry of pages before it gives
    `page_keys(tokens)[first_page:]`, so a prompt that grows is hashed only where it grew.
    A call with no full page from first_page on returns no keys and the carry it was given."""
    if page_size < 1 or not 1 <= hash_bits <= 64:
        raise ValueError(
            f"page_size must be >= 1 and hash_bits in 1..64, got {page_size}, {hash_bits}"
        )
    num_full = tokens.shape[0] // page_size
    if num_full <= first_page:
        return np.zeros(0, dtype=np.uint64), carry
    key_mask = (1 << hash_bits) - 1
    if _C is not None and tokens.dtype in _C_TOKENS and tokens.flags.c_contiguous:
        keys = np.empty(num_full - first_page, dtype=np.uint64)
        carry = _C.chain(tokens, _token_weights(page_size), keys, first_page, carry, key_mask)
        return keys, carry
    # int32 -> int64 -> uint64 keeps negative ids distinct (two's complement), never clips them.
    pages = (
        tokens[first_page * page_size : num_full * page_size]
        .astype(np.int64)
        .view(np.uint64)
        .reshape(num_full - first_page, page_size)
    )
    with np.errstate(over="ignore"):
        # The row sums as one integer matmul (the same sums mod 2**64, without a product
        # array as large as the prompt); a single-token page is one product.
        weights = _token_weights(page_size)
        content = pages @ weights if page_size > 1 else pages[:, 0] * weights[0]
        position = np.arange(first_page, num_full, dtype=np.uint64)
        sums = np.cumsum(mix64(content + position * _GOLDEN), dtype=np.uint64)
        if carry:
            sums += np.uint64(carry)
        carry = int(sums[-1])
        chained = mix64(sums)
    if hash_bits < 64:
        chained &= np.uint64(key_mask)
    return chained, carry
