"""The prefix index's level 1 (sim/kv/page_slots.py): the C table and the dict answer alike."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv import page_slots
from sim.kv.page_slots import DictSlots, TableSlots, new_page_slots

needs_c = pytest.mark.skipif(page_slots._C is None, reason="the native build is not in use")
KINDS = ["dict", pytest.param("table", marks=needs_c)]


def make(kind: str) -> DictSlots | TableSlots:
    return DictSlots() if kind == "dict" else TableSlots()


# Small keys collide in a small table's home slots, large ones test the 64-bit range.
KEY = st.one_of(st.integers(0, 40), st.integers(2**63, 2**64 - 1))
PAGE = st.integers(0, 2**31 - 1)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.lists(st.tuples(KEY, PAGE), max_size=12)),
        st.tuples(st.just("pop"), st.lists(KEY, max_size=12)),
        st.tuples(st.just("run"), st.lists(KEY, max_size=12)),
        st.tuples(st.just("get"), KEY),
    ),
    max_size=60,
)


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
    """The counts the fill bound is kept by are the arrays' own, under the bound."""
    assert slots._num_live == int((slots._pages >= 0).sum())
    assert slots._num_gone == int((slots._pages == page_slots.GONE).sum())
    assert slots._num_live + slots._num_gone <= slots._max_filled


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_every_answer_is_a_dicts(kind, ops):
    slots, reference = make(kind), {}
    for op, arg in ops:
        assert apply_to(slots, op, arg) == apply_to_dict(reference, op, arg)
        assert len(slots) == len(reference)
        if kind == "table":
            check_counts(slots)
    assert dict(slots.items()) == reference
    assert sorted(slots) == sorted(reference)
    for key in reference:
        assert key in slots and slots[key] == reference[key]


@pytest.mark.parametrize("kind", KINDS)
def test_a_table_grows_and_reuses_its_tombstones_without_losing_a_key(kind):
    slots, reference = make(kind), {}
    for round_ in range(6):
        keys = [(round_ * 7919 + i) * 0x9E3779B97F4A7C15 % 2**64 for i in range(3000)]
        assert slots.claim(keys, list(range(3000))) == [
            reference.setdefault(k, p) for k, p in zip(keys, range(3000), strict=True)
        ]
        gone = keys[::2]
        assert slots.pop_many(gone) == [reference.pop(k, -1) for k in gone]
    assert len(slots) == len(reference) == 6 * 1500
    assert dict(slots.items()) == reference
    if kind == "table":  # tombstones and live keys stay under the fill bound
        check_counts(slots)


@needs_c
def test_a_key_claimed_again_takes_its_own_tombstone():
    slots = TableSlots()
    slots.claim([3], [7])
    assert slots.pop_many([3]) == [7] and slots._num_gone == 1
    slots.claim([3], [8])  # its home slot is its old tombstone
    assert slots._num_gone == 0 and slots[3] == 8
    check_counts(slots)


@needs_c
def test_a_rebuild_that_fails_leaves_the_table_whole(monkeypatch):
    slots = TableSlots()
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
    slots.claim([99], [5])
    assert len(slots) == 12 and slots[99] == 5


@needs_c
def test_a_batch_with_a_bad_key_or_page_changes_nothing():
    slots = TableSlots()
    slots.claim([1, 2], [10, 11])
    with pytest.raises(TypeError):
        slots.claim([3, "4"], [12, 13])  # type: ignore[list-item]
    with pytest.raises(OverflowError):
        slots.claim([3, 2**64], [12, 13])
    with pytest.raises(ValueError):
        slots.claim([3, 4], [12, -1])
    with pytest.raises(ValueError):
        slots.claim([3, 4], [12])
    assert dict(slots.items()) == {1: 10, 2: 11} and len(slots) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_keys_are_found_by_their_int_value_and_other_objects_are_absent(kind):
    import numpy as np

    slots = make(kind)
    slots.claim([5], [1])
    assert np.uint64(5) in slots and slots.get(np.int64(5)) == 1 and slots[np.uint64(5)] == 1
    assert "x" not in slots and slots.get("x") is None  # type: ignore[call-overload]


@needs_c
def test_ints_outside_the_key_range_are_absent_in_reads_and_removals():
    slots = TableSlots()
    slots.claim([0, 2**64 - 1], [1, 2])
    assert slots.get(-1) is None and slots.get(2**64) is None and 2**64 not in slots
    assert slots.pop_many([-1, 2**64, 0]) == [-1, -1, 1]
    assert slots.run([2**64 - 1, -5, 2**64 - 1]) == [2]
    assert dict(slots.items()) == {2**64 - 1: 2}


@needs_c
def test_the_c_loops_refuse_arrays_of_other_types_or_sizes():
    import numpy as np

    keys, pages = np.zeros(16, np.uint64), np.full(16, -1, np.int32)
    with pytest.raises(TypeError):
        page_slots._C.get(keys.astype(np.int32), pages, 15, 1)
    with pytest.raises(TypeError):
        page_slots._C.get(keys, pages.astype(np.int64), 15, 1)
    with pytest.raises(ValueError):
        page_slots._C.get(keys, pages, 31, 1)  # the mask wants 32 slots
    with pytest.raises(ValueError):
        page_slots._C.get(keys, pages, 14, 1)  # not a power of two minus 1


def test_the_build_decides_which_table_an_index_gets():
    expected = TableSlots if page_slots._C is not None else DictSlots
    assert type(new_page_slots()) is expected
    assert type(new_page_slots(compiled=False)) is DictSlots
