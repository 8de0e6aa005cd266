"""The routing table's numpy entries (`sim/holder_table.py`) keep the mapping a dict of key ->
bitmask keeps, through growth, removals (tombstones and their purges in numpy, closed-up clusters
in C), shared keys and keys whose low bits collide (long probe paths), in batches probed key by
key and vectorised, and with the probe loops in C (sim/_holders.c, where the native build is in
use: `compiled`) (issue 18)."""

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


def check_slots(table: HolderTable, compiled: bool) -> None:
    """The live count is the arrays' own, within the fill bound; in C no slot is a tombstone and
    no key's probe path crosses an empty slot before it (what lets a removal close up its
    cluster)."""
    codes, keys, mask = table._holder, table._keys, table._mask
    live = codes >= holder_table.SHARED
    assert table._num_live == int(live.sum())
    assert table._num_live + table._num_gone <= table._max_filled
    if not (compiled and holder_table._C is not None):
        return
    assert table._num_gone == 0 and set(codes[~live].tolist()) <= {holder_table.EMPTY}
    for slot in live.nonzero()[0].tolist():
        home = int(keys[slot]) & mask
        assert all(live[(home + step) & mask] for step in range(((slot - home) & mask) + 1))


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
        check_slots(table, compiled)
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
    check_slots(table, compiled)


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
    assert c.add(keys, holder, 15, *args) == (1, None) and holder[1] == 0
    assert c.add(keys, holder, 15, [2], 0, {}, [1]) == (1, None)
    with pytest.raises(ValueError):  # the new table too small for the old one's 2 keys
        c.rehash(keys, holder, 15, np.zeros(1, np.uint64), np.full(1, -3, np.int16), 0)


@needs_c
def test_a_removal_in_c_closes_up_its_cluster_slot_by_slot():
    """Keys 16 apart share home 1 of a 16-slot table (2 is a home too): removing the first moves
    each later key whose home allows it one slot back, and the cluster's end is emptied."""
    table = HolderTable(2)
    table.add([1, 17, 2, 33], 0)  # slots 1, 2, 3, 4 (2 was taken by 17: it goes to 3)
    table.add([17], 1)  # shared: its bitmask in the dict, its slot's code SHARED
    assert table._keys[1:5].tolist() == [1, 17, 2, 33]
    table.remove([1], 0)
    assert table._keys[1:4].tolist() == [17, 2, 33] and table._holder[4] == holder_table.EMPTY
    assert table._holder[1:4].tolist() == [holder_table.SHARED, 0, 0]
    assert dict(table.items()) == {17: 0b11, 2: 1, 33: 1}
    table.remove([17], 0)
    table.remove([17], 1)  # the last holder leaves: the key goes, 2 stays home, 33 moves up
    assert table._keys[1:3].tolist() == [33, 2] and dict(table.items()) == {2: 1, 33: 1}
    check_slots(table, True)


@needs_c
def test_a_table_in_c_grows_by_rehash_and_never_rebuilds_at_its_size(monkeypatch):
    table, sizes = HolderTable(3), []
    rebuild = HolderTable._rebuild
    monkeypatch.setattr(
        HolderTable, "_rebuild", lambda self, n: (sizes.append(self._keys.size), rebuild(self, n))
    )
    for round_ in range(200):  # a rolling window of 600 keys, 3 nodes, 60,000 removals
        keys = [(1000 * round_ + i) * 0x9E3779B97F4A7C15 % 2**64 for i in range(300)]
        table.add(keys, round_ % 3)
        if round_ >= 2:
            old = [(1000 * (round_ - 2) + i) * 0x9E3779B97F4A7C15 % 2**64 for i in range(300)]
            table.remove(old, (round_ - 2) % 3)
        check_slots(table, True)
    # the first three batches grow it (300, 600, then 900 keys before a removal), and 59,400
    # removals later it has not been rebuilt again
    assert sizes == [16, 512, 1024] and table._keys.size == 2048 and len(table) == 600
