"""Chained page keys: prefix-stable, position-aware, any single-token change shows from its page on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv import hashing
from sim.kv.hashing import chained_page_keys, page_keys

PAGE = 4


def test_equal_prefixes_share_keys_and_a_partial_tail_is_not_keyed():
    a = np.arange(10, dtype=np.int32)  # 2 full pages + 2 tokens
    b = np.concatenate([np.arange(8, dtype=np.int32), [99, 98, 97, 96]])
    ka, kb = page_keys(a, PAGE), page_keys(b, PAGE)
    assert ka.shape == (2,) and kb.shape == (3,)
    assert (ka == kb[:2]).all()


def test_position_and_order_matter():
    x, y = np.arange(4, dtype=np.int32), np.arange(4, 8, dtype=np.int32)
    assert page_keys(np.concatenate([x, y]), PAGE)[1] != page_keys(np.concatenate([y, x]), PAGE)[1]
    assert page_keys(np.concatenate([x, x]), PAGE)[0] != page_keys(np.concatenate([x, x]), PAGE)[1]


def test_narrow_keys_are_the_low_bits_of_the_full_keys():
    tokens = np.random.default_rng(0).integers(0, 1000, 64, dtype=np.int32)
    full, short = page_keys(tokens, PAGE), page_keys(tokens, PAGE, hash_bits=5)
    assert (short == (full & np.uint64(31))).all() and (short < 32).all()


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        page_keys(np.arange(8, dtype=np.int32), 0)
    with pytest.raises(ValueError):
        page_keys(np.arange(8, dtype=np.int32), PAGE, hash_bits=65)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=PAGE, max_size=40), st.data())
def test_one_token_changed_changes_every_key_from_its_page_on(tokens, data):
    a = np.array(tokens, dtype=np.int32)
    pos = data.draw(st.integers(0, a.size - 1))
    b = a.copy()
    b[pos] = np.int32(data.draw(st.integers(-(2**31), 2**31 - 1).filter(lambda v: v != a[pos])))
    ka, kb = page_keys(a, PAGE), page_keys(b, PAGE)
    page = pos // PAGE
    assert (ka[:page] == kb[:page]).all()
    assert (ka[page:] != kb[page:]).all()
    n = data.draw(st.integers(0, a.size))  # prefix stable: a shorter prompt keeps its keys
    assert (page_keys(a[:n], PAGE) == ka[: n // PAGE]).all()


def _numpy_keys(*args) -> tuple[np.ndarray, int]:
    """chained_page_keys with its numpy loop (the C one set aside)."""
    compiled, hashing._C = hashing._C, None
    try:
        return chained_page_keys(*args)
    finally:
        hashing._C = compiled


@pytest.mark.skipif(hashing._C is None, reason="the native build is not in use")
@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([np.int32, np.int64]),
    st.integers(1, 17),
    st.integers(0, 120),
    st.integers(1, 64),
    st.data(),
)
def test_the_c_loop_gives_the_numpy_keys_and_carry_bit_for_bit(dtype, page, n, bits, data):
    info = np.iinfo(dtype)
    values = st.integers(int(info.min), int(info.max))
    tokens = np.array(data.draw(st.lists(values, min_size=n, max_size=n)), dtype=dtype)
    first = data.draw(st.integers(0, n // page + 1))
    carry = data.draw(st.sampled_from([0, 1, 2**64 - 1]) | st.integers(0, 2**64 - 1))
    keys, after = chained_page_keys(tokens, page, bits, first, carry)
    expected, expected_after = _numpy_keys(tokens, page, bits, first, carry)
    assert keys.dtype == np.uint64 and keys.tolist() == expected.tolist()
    assert after == expected_after


def test_strided_and_other_dtypes_take_the_numpy_loop_with_the_same_keys():
    tokens = np.arange(-20, 44, dtype=np.int64)
    assert page_keys(tokens[::2], PAGE).tolist() == page_keys(tokens[::2].copy(), PAGE).tolist()
    assert page_keys(tokens.astype(np.int16), PAGE).tolist() == page_keys(tokens, PAGE).tolist()
