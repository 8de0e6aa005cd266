"""The bulk (C-level) key updates give the same dict entries as the per-key loops they replaced:
the routing table's stored/removed events and the prefix index's level-1 claims; a key chain
continued from its carry gives the keys of hashing the whole prompt (issue 18)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv.hashing import chained_page_keys, page_keys
from sim.kv.index_base import ROOT
from sim.kv.prefix_index import TwoLevelIndex
from sim.routing_table import RoutingTable


def _event_by_key(table: dict[int, int], event: str, keys: list[int], bit: int) -> None:
    """The per-key loop the bulk update replaced (the reference)."""
    if event == "stored":
        for key in keys:
            holders = table.setdefault(key, bit)
            if not holders & bit:
                table[key] = holders | bit
        return
    for key in keys:
        holders = table.pop(key, 0) & ~bit
        if holders:
            table[key] = holders


# small key spaces: repeats within a batch, keys other nodes hold, keys nobody holds
_events = st.lists(
    st.tuples(
        st.sampled_from(["stored", "removed"]),
        st.lists(st.integers(0, 12), max_size=9),
        st.integers(0, 69),  # nodes past 63: bitmasks wider than a machine word
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_events)
def test_routing_table_events_match_the_per_key_loop(events):
    table = RoutingTable(70)
    reference: dict[int, int] = {}
    for event, keys, node in events:
        table.on_cache_event(event, keys, node)
        _event_by_key(reference, event, keys, 1 << node)
        assert table.key_to_nodes == reference


def _claims_by_key(slots: dict[int, int], keys: list[int], pages: list[int]) -> int:
    """The per-key setdefault loop of the level-1 fast path (the reference)."""
    count = 0
    for key, page in zip(keys, pages, strict=True):
        if slots.setdefault(key, page) != page:
            break
        count += 1
    return count


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 15), min_size=1, max_size=8), max_size=12))
def test_level1_claims_match_the_per_key_loop(chains):
    """Chains of keys (repeats within a chain and across chains) claimed on an index without
    an overflow, the pages claimed then linked (as insert_chain does): the leading run claimed
    and the slots, in order, equal the setdefault loop's."""
    index = TwoLevelIndex(num_pages=128, page_size=2)
    reference: dict[int, int] = {}
    next_page = 0
    for keys in chains:
        pages = list(range(next_page, next_page + len(keys)))
        next_page += len(keys)
        want = _claims_by_key(reference, keys, pages)
        got = index._claim_leading(pages, keys)
        assert got == want
        assert dict(index.key_to_page.items()) == reference
        if got:
            index._link(pages[:got], keys[:got], ROOT)


def test_a_chain_repeating_a_key_stops_there():
    index = TwoLevelIndex(num_pages=16, page_size=1)
    assert index._claim_leading([0, 1, 2, 3], [7, 8, 7, 9]) == 2
    assert index.key_to_page == {7: 0, 8: 1}
    index._link([0, 1], [7, 8], ROOT)  # the pages claimed are linked (insert_chain)
    assert index._claim_leading([4, 5], [9, 8]) == 1  # 8 is taken
    assert index.key_to_page == {7: 0, 8: 1, 9: 4}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=200),
    st.sampled_from([1, 2, 3, 16]),
    st.sampled_from([5, 64]),
    st.integers(0, 80),
)
def test_a_chain_continued_from_its_carry_gives_the_same_keys(ids, page_size, hash_bits, cut):
    tokens = np.array(ids, dtype=np.int32)
    whole = page_keys(tokens, page_size, hash_bits)
    first_page = min(cut, tokens.shape[0] // page_size)
    head, carry = chained_page_keys(tokens[: first_page * page_size], page_size, hash_bits)
    tail, end_carry = chained_page_keys(tokens, page_size, hash_bits, first_page, carry)
    assert np.array_equal(np.concatenate([head, tail]), whole)
    assert end_carry == chained_page_keys(tokens, page_size, hash_bits)[1]
