"""TokenStream draws ahead in chunks and gives the same ids as one random_tokens call per take."""

from __future__ import annotations

import numpy as np

from workloads.tokens import TokenStream, random_tokens


def test_token_stream_equals_one_call_per_take():
    for seed in range(8):
        lengths = np.random.default_rng(seed + 100).integers(0, 3000, size=300).tolist()
        lengths[::7] = [1] * len(lengths[::7])  # odd lengths: the spare half word carries over
        one_by_one = np.random.default_rng([seed, 0])
        stream = TokenStream(np.random.default_rng([seed, 0]), chunk=4096)
        for n in lengths:
            want = random_tokens(one_by_one, n)
            got = stream.take(n)
            assert got.dtype == np.int32 and got.tolist() == want.tolist()


def test_token_stream_takes_are_copies():
    stream = TokenStream(np.random.default_rng(0), chunk=64)
    a = stream.take(10)
    b = stream.take(10)
    a[:] = -1
    assert (b >= 0).all()
