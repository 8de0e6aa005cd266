"""The prefix index's level 1 (sim/kv/page_slots.py): the C table and the dict answer alike.

The table keeps only pages in its slots, each slot's key being its page's entry in the index's
page keys, so a page holds one slot at most: the operations below claim pages that hold none
(as the index does), and a claim of a page holding another key is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv import page_slots
from sim.kv.page_slots import DictSlots, TableSlots, new_page_slots

needs_c = pytest.mark.skipif(page_slots._C is None, reason="the native build is not in use")
# "table": uint16 slots (a pool of NUM_PAGES); "wide": int32 slots (a pool of 70,000 pages)
KINDS = ["dict", pytest.param("table", marks=needs_c), pytest.param("wide", marks=needs_c)]


NUM_PAGES = 20_000  # the pool the page keys are of


def make(kind: str) -> DictSlots | TableSlots:
    if kind == "dict":
        return DictSlots()
    return TableSlots(np.zeros(NUM_PAGES if kind == "table" else 70_000, dtype=np.uint64))


# Small keys collide in a small table's home slots, large ones test the 64-bit range.
KEY = st.one_of(st.integers(0, 40), st.integers(2**63, 2**64 - 1))
PAGE = st.integers(0, NUM_PAGES - 1)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.lists(st.tuples(KEY, PAGE), max_size=12)),
        st.tuples(st.just("pop"), st.lists(KEY, max_size=12)),
        st.tuples(st.just("run"), st.lists(KEY, max_size=12)),
        st.tuples(st.just("get"), KEY),
    ),
    max_size=60,
)


def unheld(reference: dict[int, int], pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The claim's pairs with each page that holds a key now, or that an earlier pair of the
    batch may place, replaced by the next page that does neither (the index's claims)."""
    taken = set(reference.values())
    out = []
    for key, page in pairs:
        while page in taken:
            page = (page + 1) % NUM_PAGES
        taken.add(page)
        out.append((key, page))
    return out


def apply_to_dict(reference: dict[int, int], op: str, arg):
    """What a dict answers, key by key."""
    if op == "claim":
        return [reference.setdefault(key, page) for key, page in arg]
    if op == "pop":
        return [reference.pop(key, -1) for key in arg]
    if op == "run":
        out = []
        for key in arg:
            if key not in reference:
                break
            out.append(reference[key])
        return out
    return reference.get(arg)


def apply_to(slots, op: str, arg):
    if op == "claim":
        return slots.claim([k for k, _ in arg], [p for _, p in arg])
    if op == "pop":
        return slots.pop_many(arg)
    if op == "run":
        return slots.run(arg)
    return slots.get(arg)


def check_counts(slots: TableSlots) -> None:
    """The count the fill bound is kept by is the arrays' own, under the bound; every vacant slot
    is EMPTY; and no key's probe path crosses an empty slot before it (what lets removals close
    up their clusters instead of leaving tombstones)."""
    pages, keys, mask, filled = slots._pages, slots._keys, slots._mask, slots.filled
    assert slots._num_live == int(filled.sum()) <= slots._max_filled
    empty = page_slots.NARROW_EMPTY if pages.dtype == np.uint16 else page_slots.EMPTY
    assert set(pages[~filled].tolist()) <= {empty}
    assert (pages[filled] < NUM_PAGES).all()
    for slot in filled.nonzero()[0].tolist():
        home = int(keys[slot]) & mask
        path = [(home + step) & mask for step in range(((slot - home) & mask) + 1)]
        assert all(filled[p] for p in path), (slot, home)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_every_answer_is_a_dicts(kind, ops):
    slots, reference = make(kind), {}
    for op, arg in ops:
        if op == "claim":
            arg = unheld(reference, arg)
        assert apply_to(slots, op, arg) == apply_to_dict(reference, op, arg)
        assert len(slots) == len(reference)
        if kind != "dict":
            check_counts(slots)
    assert dict(slots.items()) == reference
    assert sorted(slots) == sorted(reference)
    for key in reference:
        assert key in slots and slots[key] == reference[key]


@pytest.mark.parametrize("kind", KINDS)
def test_a_table_grows_and_refills_removed_slots_without_losing_a_key(kind):
    slots, reference = make(kind), {}
    for round_ in range(6):
        keys = [(round_ * 7919 + i) * 0x9E3779B97F4A7C15 % 2**64 for i in range(3000)]
        pages = range(3000 * round_, 3000 * (round_ + 1))
        assert slots.claim(keys, list(pages)) == [
            reference.setdefault(k, p) for k, p in zip(keys, pages, strict=True)
        ]
        gone = keys[::2]
        assert slots.pop_many(gone) == [reference.pop(k, -1) for k in gone]
    assert len(slots) == len(reference) == 6 * 1500
    assert dict(slots.items()) == reference
    if kind != "dict":  # live keys stay under the fill bound, in the smallest table for them
        check_counts(slots)
        assert slots._keys.size == 16384  # 9,000 live keys: 70% of 16,384 (11,468), not 8,192


def slot_map(slots: TableSlots) -> dict[int, tuple[int, int]]:
    """slot -> (key, page) of every filled slot."""
    filled = slots.filled.nonzero()[0].tolist()
    return {s: (int(slots._keys[s]), int(slots._pages[s])) for s in filled}


@needs_c
def test_a_removal_closes_up_its_cluster():
    slots = make("table")  # 16 slots: a key's home is its low 4 bits
    slots.claim([1, 17, 33, 2], [10, 11, 12, 13])  # 1, 17, 33 home at 1; 2 at 2, pushed to 4
    assert slot_map(slots) == {1: (1, 10), 2: (17, 11), 3: (33, 12), 4: (2, 13)}
    assert slots.pop_many([17]) == [11]
    # 33 moves back into 17's slot, then 2 into 33's: the cluster ends one slot sooner
    assert slot_map(slots) == {1: (1, 10), 2: (33, 12), 3: (2, 13)}
    assert slots.pop_many([1]) == [10]  # 33 into slot 1, then 2 back to its home, slot 2
    assert slot_map(slots) == {1: (33, 12), 2: (2, 13)}
    slots.claim([4], [14])  # home 4, its own slot: nothing moves for it
    assert slots.pop_many([33]) == [12]  # 2 stays: its home is the gap's successor, itself
    assert slot_map(slots) == {2: (2, 13), 4: (4, 14)}
    check_counts(slots)


@needs_c
def test_a_removal_closes_up_a_cluster_that_wraps_round():
    slots = make("table")
    slots.claim([15, 31, 47, 0], [1, 2, 3, 4])  # home 15 thrice: slots 15, 0, 1; 0 pushed to 2
    assert slot_map(slots) == {15: (15, 1), 0: (31, 2), 1: (47, 3), 2: (0, 4)}
    assert slots.pop_many([15]) == [1]
    assert slot_map(slots) == {15: (31, 2), 0: (47, 3), 1: (0, 4)}
    check_counts(slots)
    slots.claim([15], [9])  # back at the cluster's end, found by its path
    assert slots[15] == 9 and slots.run([31, 47, 0, 15]) == [2, 3, 4, 9]


@needs_c
def test_a_rebuild_that_fails_leaves_the_table_whole(monkeypatch):
    slots = make("table")
    keys = list(range(1, 12))  # 11 keys: a 16-slot table is at its bound
    slots.claim(keys, list(range(11)))

    class Failing:  # the rebuild's claim runs out of memory
        def __getattr__(self, name):
            if name == "claim":
                raise MemoryError
            return getattr(page_slots._C, name)

    with monkeypatch.context() as patch:
        patch.setattr(page_slots, "_C", Failing())
        with pytest.raises(MemoryError):
            slots.claim([99], [5])
    assert dict(slots.items()) == dict(zip(keys, range(11), strict=True))
    check_counts(slots)
    slots.claim([99], [11])
    assert len(slots) == 12 and slots[99] == 11


@needs_c
def test_a_batch_with_a_bad_key_or_page_changes_nothing():
    slots = make("table")
    slots.claim([1, 2], [10, 11])
    with pytest.raises(TypeError):
        slots.claim([3, "4"], [12, 13])  # type: ignore[list-item]
    with pytest.raises(OverflowError):
        slots.claim([3, 2**64], [12, 13])
    with pytest.raises(ValueError):
        slots.claim([3, 4], [12, -1])
    with pytest.raises(ValueError):
        slots.claim([3, 4], [12])
    with pytest.raises(ValueError):  # past the pool's pages
        slots.claim([3, 4], [12, NUM_PAGES])
    assert dict(slots.items()) == {1: 10, 2: 11} and len(slots) == 2


@needs_c
def test_a_page_holding_a_slot_cannot_claim_another_key():
    slots = make("table")
    slots.claim([1, 2], [10, 11])
    assert slots.claim([2, 3], [10, 12]) == [11, 12]  # 2 is held: page 10 is not placed
    with pytest.raises(ValueError):
        slots.claim([4, 5], [13, 10])  # 10 holds key 1: 4 is placed, then the batch stops
    assert dict(slots.items()) == {1: 10, 2: 11, 3: 12, 4: 13} and len(slots) == 4
    check_counts(slots)
    assert slots.pop_many([1]) == [10] and slots.claim([5], [10]) == [10]  # freed: it may


@pytest.mark.parametrize("kind", KINDS)
def test_keys_are_found_by_their_int_value_and_other_objects_are_absent(kind):
    slots = make(kind)
    slots.claim([5], [1])
    assert np.uint64(5) in slots and slots.get(np.int64(5)) == 1 and slots[np.uint64(5)] == 1
    assert "x" not in slots and slots.get("x") is None  # type: ignore[call-overload]


@needs_c
def test_ints_outside_the_key_range_are_absent_in_reads_and_removals():
    slots = make("table")
    slots.claim([0, 2**64 - 1], [1, 2])
    assert slots.get(-1) is None and slots.get(2**64) is None and 2**64 not in slots
    assert slots.pop_many([-1, 2**64, 0]) == [-1, -1, 1]
    assert slots.run([2**64 - 1, -5, 2**64 - 1]) == [2]
    assert dict(slots.items()) == {2**64 - 1: 2}


@needs_c
def test_the_c_loops_refuse_arrays_of_other_types_or_sizes():
    keys, pages = np.zeros(16, np.uint64), np.full(16, -1, np.int32)
    with pytest.raises(TypeError):
        page_slots._C.get(keys.astype(np.int32), pages, 15, 1)
    with pytest.raises(TypeError):
        page_slots._C.get(keys, pages.astype(np.int64), 15, 1)
    with pytest.raises(ValueError):
        page_slots._C.get(keys, pages, 31, 1)  # the mask wants 32 slots
    assert page_slots._C.get(keys[:3], pages, 15, 1) == -1  # page keys: one per pool page
    with pytest.raises(ValueError):
        page_slots._C.get(keys, pages, 14, 1)  # not a power of two minus 1
    narrow = np.full(16, page_slots.NARROW_EMPTY, np.uint16)
    assert page_slots._C.get(keys, narrow, 15, 1) == -1
    with pytest.raises(TypeError):
        page_slots._C.get(keys, narrow.astype(np.int16), 15, 1)
    with pytest.raises(ValueError):  # page ids past 65,534 do not fit
        page_slots._C.get(np.zeros(65_535, np.uint64), narrow, 15, 1)


def test_the_build_decides_which_table_an_index_gets():
    expected = TableSlots if page_slots._C is not None else DictSlots
    page_keys = np.zeros(8, dtype=np.uint64)
    assert type(new_page_slots(page_keys)) is expected
    assert type(new_page_slots(page_keys, compiled=False)) is DictSlots
