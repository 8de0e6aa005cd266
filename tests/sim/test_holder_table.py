"""The routing table's numpy entries (`sim/holder_table.py`) keep the mapping a dict of key ->
bitmask keeps, through growth, tombstones and their purges, shared keys and keys whose low bits
collide (long probe paths), in batches probed key by key and vectorised, and with the probe loops
in C (sim/_holders.c, where the native build is in use: `compiled`) (issue 18)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import holder_table
from sim.holder_table import HolderTable

# Each test runs on both paths; without the build, both are the numpy one.
both = pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])

# few distinct low bits, high bits apart: keys share home slots; the top key needs 64 bits
_keys = st.builds(
    lambda low, high: low + (high << 40), st.integers(0, 40), st.integers(0, 2**24 - 1)
)
_events = st.lists(
    st.tuples(
        st.booleans(),  # stored (True) or removed
        st.lists(st.one_of(_keys, st.sampled_from([0, 1, 2**64 - 1])), max_size=30),
        st.integers(0, 69),  # nodes past 63: bitmasks wider than a machine word
    ),
    max_size=60,
)


def _reference(table: dict[int, int], stored: bool, keys: list[int], node: int) -> None:
    bit = 1 << node
    for key in keys:
        holders = table.pop(key, 0)
        holders = holders | bit if stored else holders & ~bit
        if holders:
            table[key] = holders


@both
@settings(max_examples=400, deadline=None)
@given(events=_events)
def test_holder_table_keeps_what_a_dict_keeps(events, compiled):
    table, reference = HolderTable(70, compiled), {}
    for stored, keys, node in events:
        (table.add if stored else table.remove)(keys, node)
        _reference(reference, stored, keys, node)
        assert len(table) == len(reference)
        assert table == reference
        for key in keys:
            assert table.get(key, 0) == reference.get(key, 0)
            assert (key in table) == (key in reference)
    assert sorted(table) == sorted(reference)


@both
def test_a_full_turnover_purges_the_tombstones_in_place(compiled):
    """Storing and removing a node's keys over and over keeps the table at its size."""
    table = HolderTable(2, compiled)
    table.add(list(range(1, 40)), 0)
    size = table._keys.size
    for round_ in range(50):
        keys = list(range(1000 * round_ + 100, 1000 * round_ + 130))
        table.add(keys, 1)
        table.remove(keys, 1)
    assert table._keys.size == size and len(table) == 39
    assert dict(table.items()) == dict.fromkeys(range(1, 40), 1)


@both
def test_a_key_two_nodes_hold_keeps_both_bits_until_one_is_left(compiled):
    table = HolderTable(3, compiled)
    table.add([5], 0)
    table.add([5, 6], 2)
    assert table[5] == 0b101 and table[6] == 0b100
    table.remove([5], 0)
    assert table[5] == 0b100 and not table._shared
    table.remove([5, 6, 7], 2)
    assert len(table) == 0 and 5 not in table


@both
def test_ints_no_table_can_hold_are_absent(compiled):
    table = HolderTable(2, compiled)
    table.add([1, 2], 0)
    assert -1 not in table and 2**64 not in table and table.get(2**64, 7) == 7
    table.remove([1, -1, 2**64], 0)  # the ints outside 0..2**64-1 are left alone
    assert dict(table.items()) == {2: 1} and len(table) == 1


needs_c = pytest.mark.skipif(holder_table._C is None, reason="the native build is not in use")


@needs_c
def test_a_batch_with_a_bad_key_fails_whole_in_c():
    """Every key is converted before the C loop changes a slot (a review found counts lost)."""
    table = HolderTable(3)
    table.add([5], 0)
    for bad in (-1, 2**64, "6", 1.5):
        with pytest.raises((OverflowError, TypeError)):
            table.add([6, 7, bad], 2)
        assert dict(table.items()) == {5: 1} and len(table) == 1 == table._num_live


@needs_c
def test_the_c_loops_refuse_arrays_of_other_types_or_sizes():
    c, keys, holder = holder_table._C, np.zeros(16, np.uint64), np.full(16, -3, np.int16)
    args = ([1], 0, {}, [1])
    for bad_keys, bad_holder, mask in (
        (keys.astype(np.int64).astype(np.float64), holder, 15),
        (keys, holder.astype(np.uint16), 15),
        (keys, holder, 7),
        (keys[:0], holder[:0], 2**64 - 1),
        (keys, holder, 14),
    ):
        with pytest.raises((TypeError, ValueError, OverflowError)):
            c.add(bad_keys, bad_holder, mask, *args)
    assert c.add(keys, holder, 15, *args) == (1, 0, None) and holder[1] == 0
