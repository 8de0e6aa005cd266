"""TwoLevelIndex._claim_leading: the slots a new chain claims at once are exactly those a claim
key by key would take, in the same order (level 1's order is the routing table's), taken and
repeated keys included."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sim.kv.prefix_index import TwoLevelIndex


def claim_one_by_one(slots: dict[int, int], pages: list[int], keys: list[int]) -> int:
    """The reference: claim each key in turn, stop at the first one already held."""
    for count, (key, page) in enumerate(zip(keys, pages, strict=True)):
        if key in slots:
            return count
        slots[key] = page
    return len(keys)


def index_holding(held: dict[int, int]) -> TwoLevelIndex:
    index = TwoLevelIndex(64, 4)
    index.key_to_page.claim(list(held), list(held.values()))
    return index


def test_a_taken_key_ends_the_run_and_later_keys_stay_free():
    index = index_holding({7: 1})
    assert index._claim_leading([10, 11, 12, 13], [5, 6, 7, 8]) == 2
    assert dict(index.key_to_page.items()) == dict([(7, 1), (5, 10), (6, 11)])


def test_a_key_repeated_within_the_chain_ends_the_run_at_its_second_sight():
    index = index_holding({})
    assert index._claim_leading([10, 11, 12, 13], [5, 6, 5, 9]) == 2
    assert dict(index.key_to_page.items()) == dict([(5, 10), (6, 11)])


def test_a_chain_of_free_keys_claims_them_all_in_order():
    index = index_holding({1: 3})
    assert index._claim_leading([10, 11, 12], [9, 4, 6]) == 3
    assert dict(index.key_to_page.items()) == dict([(1, 3), (9, 10), (4, 11), (6, 12)])


@given(
    # keys held by pages 9, 8, ... (a page holds one slot at most: sim/kv/page_slots.py)
    held=st.lists(st.integers(0, 12), unique=True, max_size=6).map(
        lambda held_keys: {key: 9 - i for i, key in enumerate(held_keys)}
    ),
    keys=st.lists(st.integers(0, 12), min_size=1, max_size=10),
)
def test_claims_as_one_by_one(held, keys):
    pages = list(range(20, 20 + len(keys)))  # new pages: no slot holds them
    index = index_holding(held)
    reference = dict(held)
    assert index._claim_leading(pages, keys) == claim_one_by_one(reference, pages, keys)
    assert dict(index.key_to_page.items()) == reference
