"""The baseline ("OpenClaw") allocator: one contiguous region per request, first fit, no compaction.

Addresses are bytes in a linear space. The pool starts empty and grows by whole segments up to the
physical limit, as a caching allocator does. A request reserves its maximum length up front; freed
regions become holes, and holes merge only with adjacent holes, so memory fragments: a request can
find no hole large enough although the free bytes add up. That failure is an OOM event.
"""

from __future__ import annotations

import bisect


class ContiguousAllocator:
    def __init__(self, capacity_bytes: int, segment_bytes: int):
        self.capacity_bytes = int(capacity_bytes)
        self.segment_bytes = int(segment_bytes)
        self.pool_bytes = 0  # grown so far
        self.holes: list[tuple[int, int]] = []  # sorted (start, size), no two adjacent
        self.regions: dict[int, tuple[int, int]] = {}  # owner -> (start, size)
        self.used_bytes = 0

    def allocate(self, owner: int, size: int) -> bool:
        """Reserve `size` bytes for `owner`; grow the pool if no hole fits. False = OOM."""
        assert owner not in self.regions
        slot = self._first_fit(size)
        while slot is None and self._grow_room() > 0:
            self._grow()
            slot = self._first_fit(size)
        if slot is None:
            return False
        start, hole_size = self.holes.pop(slot)
        if hole_size > size:
            self.holes.insert(slot, (start + size, hole_size - size))
        self.regions[owner] = (start, size)
        self.used_bytes += size
        return True

    def free(self, owner: int) -> None:
        start, size = self.regions.pop(owner)
        self.used_bytes -= size
        self._add_hole(start, size)

    @property
    def free_bytes(self) -> int:
        return self.pool_bytes - self.used_bytes

    @property
    def largest_hole(self) -> int:
        return max((size for _, size in self.holes), default=0)

    def fragmentation_bytes(self) -> int:
        """Free bytes inside the grown pool that are not in its largest hole (unusable for a big request)."""
        return self.free_bytes - self.largest_hole

    # -- internals ---------------------------------------------------------------------------
    def _first_fit(self, size: int) -> int | None:
        for i, (_, hole_size) in enumerate(self.holes):
            if hole_size >= size:
                return i
        return None

    def _grow_room(self) -> int:
        return self.capacity_bytes - self.pool_bytes

    def _grow(self) -> None:
        step = min(self.segment_bytes, self._grow_room())
        start = self.pool_bytes
        self.pool_bytes += step
        self._add_hole(start, step)

    def _add_hole(self, start: int, size: int) -> None:
        i = bisect.bisect_left(self.holes, (start, 0))
        if i < len(self.holes) and start + size == self.holes[i][0]:  # merge with the next hole
            size += self.holes.pop(i)[1]
        if i and sum(self.holes[i - 1]) == start:  # merge with the previous hole
            prev_start, prev_size = self.holes.pop(i - 1)
            start, size, i = prev_start, prev_size + size, i - 1
        self.holes.insert(i, (start, size))
