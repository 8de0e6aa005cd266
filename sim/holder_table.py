"""Page key -> bitmask of the nodes holding it: the routing table's entries, in numpy arrays.

The same mapping a `dict[int, int]` of key -> bitmask keeps (bit i = node i), held by open
addressing (linear probing from the key's low bits; keys are well-mixed hashes) in two arrays:
the key (uint64) and its holder (int16: the one node holding it, or SHARED when several do,
their bitmask then in a small dict). At 256 nodes the table holds ~9M keys: a dict took ~76
bytes a key (its index and entries at the load its growth leaves), this ~10 bytes a slot at
most 70% full (tombstones included), so ~19 bytes a key.

With the native build (sim/native.py) the batches are probed key by key in C (sim/_holders.c),
the shared bitmasks kept in the same dict; without it, in numpy rounds. Slots may differ between
the two, answers never (tests/sim/test_holder_table.py runs both against a dict).

In C a removal closes up its cluster (backward-shift deletion), so the table holds live keys
only and is rebuilt only to grow, slot by slot in C (`rehash`). The numpy path leaves a
tombstone (GONE) so the probe paths through it stay whole. Either way, once live keys and
tombstones would fill 70% of the slots, every live key is placed again, in the smallest table
(a power of two) they fill at most 60% of: in C always a larger one. The tombstones' purges at
the same size had cost, at 256 nodes, a copy of ~9M keys with their codes and homes (~280 MB of
transient memory, the run's peak) every few million removals.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from sim import native

# The probe loops in C (sim/_holders.c), when the native build is in use; else numpy and Python.
_C = native.c_extension("sim._holders")

# holder codes besides a node id: a live key's code is >= SHARED, a vacant slot's below it
SHARED, GONE, EMPTY = -1, -2, -3
_MAX_FILL = 0.7  # live keys and tombstones; past it, every live key is placed again ...
_MAX_LIVE = 0.6  # ... in the smallest table (a power of two) they fill at most this much
_MIN_SLOTS = 16
_SCALAR_KEYS = 8  # a batch of at most this many keys is probed key by key (numpy's per-call cost)
_WINDOW = 4  # slots a batch reads at once from each key's home (most paths end within them)
_STEPS = np.arange(_WINDOW)


class HolderTable(Mapping[int, int]):
    def __init__(self, num_nodes: int, compiled: bool = True):
        assert num_nodes <= np.iinfo(np.int16).max
        self._c = _C if compiled else None  # compiled=False: the numpy path (tests compare)
        self._bits = [1 << node for node in range(num_nodes)]  # one shared int per node's bit
        self._shared: dict[int, int] = {}  # key -> bitmask, for keys several nodes hold
        self._num_live = 0
        self._num_gone = 0
        self._allocate(_MIN_SLOTS)

    def _allocate(self, num_slots: int) -> None:
        self._use(np.zeros(num_slots, dtype=np.uint64), np.full(num_slots, EMPTY, dtype=np.int16))

    def _use(self, keys: np.ndarray, holder: np.ndarray) -> None:
        self._keys, self._holder = keys, holder
        self._mask = keys.size - 1
        self._max_filled = int(_MAX_FILL * keys.size)  # live keys and tombstones

    # -- reads ---------------------------------------------------------------------------------
    def get(self, key: int, default: int = 0) -> int:  # type: ignore[override]
        slot = self._slot_of(key)
        return default if slot < 0 else self._holders_at(slot, key)

    def __getitem__(self, key: int) -> int:
        slot = self._slot_of(key)
        if slot < 0:
            raise KeyError(key)
        return self._holders_at(slot, key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, int) and self._slot_of(key) >= 0

    def __len__(self) -> int:
        return self._num_live

    def __iter__(self) -> Iterator[int]:
        return iter(self._keys[self._holder >= SHARED].tolist())

    def _slot_of(self, key: int) -> int:
        """The slot holding `key`, or -1."""
        if self._c is not None:
            return self._c.slot_of(self._keys, self._holder, self._mask, key)
        return self._probe(key, key & self._mask, -1)[0]

    def _probe(self, key: int, slot: int, vacant: int) -> tuple[int, int]:
        """From `slot` on along `key`'s path: its slot or -1, and the first vacant slot (EMPTY
        or GONE; `vacant` if one was met before), where it would go."""
        holder, keys, mask = self._holder.item, self._keys.item, self._mask
        while True:
            code = holder(slot)
            if code == EMPTY:
                return -1, slot if vacant < 0 else vacant
            if code == GONE:
                vacant = slot if vacant < 0 else vacant
            elif keys(slot) == key:
                return slot, vacant
            slot = (slot + 1) & mask

    def _holders_at(self, slot: int, key: int) -> int:
        code = self._holder.item(slot)
        return self._shared[key] if code == SHARED else self._bits[code]

    # -- updates -------------------------------------------------------------------------------
    def add(self, keys: list[int], node: int) -> None:
        """`node` holds these keys (repeats allowed): each key's bitmask gains its bit."""
        if self._num_live + self._num_gone + len(keys) > self._max_filled:
            self._rebuild(len(keys))
        if self._c is not None:  # key by key in C
            args = (self._keys, self._holder, self._mask, keys, node, self._shared, self._bits)
            live, error = self._c.add(*args)
            self._num_live += live
            if error is not None:  # a dict update failed; the keys placed before it count
                raise error
            return
        if len(keys) <= _SCALAR_KEYS:
            for key in keys:
                self._add_one(key, node)
            return
        arr = _distinct(keys)
        found, vacant = self._find(arr)
        new = found < 0
        for slot, key in zip(found[~new].tolist(), arr[~new].tolist(), strict=True):
            self._join(slot, key, node)
        self._place(arr[new], np.full(np.count_nonzero(new), node, np.int16), vacant[new])

    def remove(self, keys: list[int], node: int) -> None:
        """`node` no longer holds these keys (repeats, and keys it did not hold, allowed)."""
        if self._c is not None:  # key by key in C, each removal closing up its cluster
            args = (self._keys, self._holder, self._mask, keys, node, self._shared, self._bits)
            removed, error = self._c.remove(*args)
            self._num_live -= removed
            if error is not None:
                raise error
            return
        if len(keys) <= _SCALAR_KEYS:
            for key in keys:
                slot = self._slot_of(key)
                if slot >= 0:
                    self._leave(slot, key, node)
            return
        found, _ = self._find(_distinct(keys))
        slots = found[found >= 0]
        codes = self._holder[slots]
        own = slots[codes == node]  # this node alone held them
        self._holder[own] = GONE
        self._num_live -= own.size
        self._num_gone += own.size
        shared = slots[codes == SHARED]  # several held them: bitmasks, key by key
        for slot, key in zip(shared.tolist(), self._keys[shared].tolist(), strict=True):
            self._leave(slot, key, node)

    def _add_one(self, key: int, node: int) -> None:
        found, vacant = self._probe(key, key & self._mask, -1)
        if found >= 0:
            self._join(found, key, node)
            return
        self._num_gone -= self._holder.item(vacant) == GONE
        self._num_live += 1
        self._keys[vacant] = key
        self._holder[vacant] = node

    def _join(self, slot: int, key: int, node: int) -> None:
        """`node` holds the key at `slot` too."""
        code = self._holder.item(slot)
        if code == node:
            return
        if code == SHARED:
            self._shared[key] |= self._bits[node]
            return
        self._shared[key] = self._bits[code] | self._bits[node]
        self._holder[slot] = SHARED

    def _leave(self, slot: int, key: int, node: int) -> None:
        """`node` no longer holds the key at `slot`."""
        code = self._holder.item(slot)
        if code == node:
            self._holder[slot] = GONE
            self._num_live -= 1
            self._num_gone += 1
        elif code == SHARED:
            rest = self._shared[key] & ~self._bits[node]
            if rest & (rest - 1):  # still two or more
                self._shared[key] = rest
            else:
                del self._shared[key]
                self._holder[slot] = rest.bit_length() - 1

    # -- probing -------------------------------------------------------------------------------
    def _find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """int64 per key (distinct): its slot or -1, and the first vacant (EMPTY or GONE) slot
        on its probe path (where it would go). Every key's first _WINDOW slots are read at once
        (a round of numpy calls per probe step would cost more than the reads); a path longer
        than that goes on key by key."""
        rows = np.arange(keys.size)
        slots = (keys & np.uint64(self._mask)).astype(np.int64)[:, None] + _STEPS
        slots &= self._mask  # [keys, _WINDOW]
        codes = self._holder[slots]
        hit = (codes >= SHARED) & (self._keys[slots] == keys[:, None])
        ends = hit | (codes == EMPTY)  # a path ends at its key or at an empty slot
        end = ends.argmax(axis=1)
        found = np.where(hit[rows, end], slots[rows, end], -1)
        is_vacant = codes < SHARED
        vacant = np.where(is_vacant.any(axis=1), slots[rows, is_vacant.argmax(axis=1)], -1)
        for i in np.flatnonzero(~ends.any(axis=1)).tolist():  # past the window
            after = (slots.item(i, _WINDOW - 1) + 1) & self._mask
            found[i], vacant[i] = self._probe(keys.item(i), after, vacant.item(i))
        return found, vacant

    def _place(self, keys: np.ndarray, codes: np.ndarray, vacant: np.ndarray) -> None:
        """Keys (distinct, absent) with their holder codes into their vacant slots. Keys that
        want the same slot: the last written keeps it (read back), the others move on to the
        next vacant slot."""
        while keys.size:
            self._keys[vacant] = keys
            won = self._keys[vacant] == keys
            slots = vacant[won]
            self._num_gone -= int(np.count_nonzero(self._holder[slots] == GONE))
            self._num_live += slots.size
            self._holder[slots] = codes[won]
            lost = ~won
            keys, codes = keys[lost], codes[lost]
            vacant = self._next_vacant((vacant[lost] + 1) & self._mask)

    def _next_vacant(self, slots: np.ndarray) -> np.ndarray:
        todo = np.flatnonzero(self._holder[slots] >= SHARED)
        while todo.size:
            slots[todo] = (slots[todo] + 1) & self._mask
            todo = todo[self._holder[slots[todo]] >= SHARED]
        return slots

    # -- size ------------------------------------------------------------------------------------
    def _rebuild(self, incoming: int) -> None:
        """Every live key placed again, in a table with room for `incoming` more."""
        num_slots = self._mask + 1
        target = _MIN_SLOTS
        while self._num_live + incoming > _MAX_LIVE * target:
            target *= 2
        if self._c is not None:  # no tombstones: always larger, filled slot by slot in C
            keys = np.zeros(target, dtype=np.uint64)
            holder = np.full(target, EMPTY, dtype=np.int16)
            placed = self._c.rehash(self._keys, self._holder, self._mask, keys, holder, target - 1)
            assert placed == self._num_live
            self._use(keys, holder)  # swapped in only once every key is placed
            return
        live = self._holder >= SHARED
        keys, codes = self._keys[live], self._holder[live]
        if target == num_slots:  # the same size: reuse the arrays
            self._holder.fill(EMPTY)
        else:
            self._allocate(target)
        self._num_live = self._num_gone = 0
        home = (keys & np.uint64(self._mask)).astype(np.int64)  # vacant: the table is empty
        self._place(keys, codes, home)


def _distinct(keys: list[int]) -> np.ndarray:
    """uint64: the keys, each once (a dict's C-level pass; repeats are rare)."""
    once = dict.fromkeys(keys)
    return np.fromiter(once, dtype=np.uint64, count=len(once))
