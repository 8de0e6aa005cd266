"""Page index codec: exact round trips, exact byte layouts, sizes that match the bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.xnode.page_index_codec import (
    CHUNK_PAGES,
    MAX_PAGE_ID,
    decode,
    encode,
    encoded_size,
    kind_counts,
    normalize,
    single_page_entry_bytes,
)


def roundtrip(index) -> None:
    data = encode(index)
    assert decode(data) == normalize(index)
    assert encoded_size(index) == len(data)


# -- exact layouts ------------------------------------------------------------------------------
def test_empty_index_is_two_bytes():
    assert encode({}) == bytes([0xB1, 0])
    assert decode(encode({})) == {}


def test_a_node_with_no_pages_is_kept():
    assert encode({5: []}) == bytes([0xB1, 1, 5, 0])
    assert decode(encode({5: []})) == {5: []}


def test_one_contiguous_range_is_one_run():
    # pages 100..199 of node 2: chunk 0 (gap 0, kind RUNS=1), 1 run: start 100, length-1 = 99.
    assert encode({2: range(100, 200)}) == bytes([0xB1, 1, 2, 1, 0 << 2 | 1, 0, 100, 99])


def test_dense_scattered_pages_use_a_bitmap_with_a_base_offset():
    pages = [8, 10, 12, 13, 15]  # base 8, 8 bits: 0b10110101 (LSB = page 8)
    assert encode({0: pages}) == bytes([0xB1, 1, 0, 1, 0 << 2 | 0, 8, 7, 0b10110101])


def test_sparse_pages_use_a_delta_list():
    pages = [0, 1000, 4000]  # LIST: count-1 = 2, first 0, deltas 999, 2999 (2-byte varints)
    assert encode({1: pages}) == bytes([0xB1, 1, 1, 1, 2, 2, 0, 0xE7, 0x07, 0xB7, 0x17])


def test_chunk_gaps_skip_empty_chunks():
    # One page per chunk: a one-entry LIST (kind 2) is smallest; the second chunk is 4 past the first.
    data = encode({0: [3, 5 * CHUNK_PAGES + 3]})
    assert data == bytes([0xB1, 1, 0, 2, 0 << 2 | 2, 0, 3, 4 << 2 | 2, 0, 3])
    assert decode(data) == {0: [3, 5 * CHUNK_PAGES + 3]}


def test_largest_ids_round_trip():
    roundtrip({0: [MAX_PAGE_ID]})
    roundtrip({(1 << 40): [MAX_PAGE_ID - 1, MAX_PAGE_ID, 0]})
    roundtrip({3: range(MAX_PAGE_ID - CHUNK_PAGES - 5, MAX_PAGE_ID + 1)})


def test_full_range_and_whole_chunk():
    roundtrip({0: range(CHUNK_PAGES)})
    roundtrip({0: range(80_000)})
    assert encoded_size({0: range(80_000)}) < 200  # one run per 4096-page chunk


def test_numpy_input_equals_list_input():
    pages = np.array([9, 3, 3, 70000, 5], dtype=np.int64)
    assert encode({4: pages}) == encode({4: [3, 5, 9, 70000]})


def test_single_page_entry_bytes_is_the_largest_one_page_index():
    assert single_page_entry_bytes(3) == len(encode({3: [MAX_PAGE_ID]}))
    assert all(len(encode({3: [p]})) <= single_page_entry_bytes(3) for p in (0, 4095, 1 << 40))


@pytest.mark.parametrize("bad", [{0: [-1]}, {0: [MAX_PAGE_ID + 1]}, {-2: [1]}])
def test_out_of_range_ids_are_rejected(bad):
    with pytest.raises(ValueError):
        encode(bad)


@pytest.mark.parametrize(
    "data", [b"", b"\x00\x00", bytes([0xB1, 1, 2]), encode({0: [1]}) + b"\x00"]
)
def test_malformed_bytes_are_rejected(data):
    with pytest.raises(ValueError):
        decode(data)


def test_kind_counts():
    assert kind_counts(range(0, 2 * CHUNK_PAGES, 2)) == {"bitmap": 2, "runs": 0, "list": 0}
    assert kind_counts([]) == {"bitmap": 0, "runs": 0, "list": 0}


# -- properties ---------------------------------------------------------------------------------
page_ids = st.one_of(
    st.integers(0, 3 * CHUNK_PAGES),
    st.integers(0, MAX_PAGE_ID),
    st.integers(MAX_PAGE_ID - 2 * CHUNK_PAGES, MAX_PAGE_ID),
)
indexes = st.dictionaries(st.integers(0, 1 << 20), st.lists(page_ids, max_size=60), max_size=4)


@settings(max_examples=300, deadline=None)
@given(indexes)
def test_roundtrip_arbitrary_sets(index):
    roundtrip(index)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, MAX_PAGE_ID - 20_000),
    st.integers(1, 20_000),
    st.floats(0.0, 1.0),
    st.integers(0, 2**32 - 1),
)
def test_roundtrip_random_densities_and_ranges(base, span, density, seed):
    rng = np.random.default_rng(seed)
    offsets = np.flatnonzero(rng.random(span) < density)
    index = {7: [base + int(o) for o in offsets]}
    roundtrip(index)
    if (
        density == 1.0
    ):  # a full range: one run per chunk (<= 6 bytes) after the first chunk's number
        assert encoded_size({7: range(base, base + span)}) <= 4 + 8 + 6 * (span // CHUNK_PAGES + 2)
