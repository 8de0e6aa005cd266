"""The contiguous baseline allocator: first fit, hole merging, growth, and fragmentation OOM."""

from __future__ import annotations

from sim.kv.contiguous import ContiguousAllocator


def test_first_fit_reuses_the_first_hole_that_fits():
    a = ContiguousAllocator(capacity_bytes=100, segment_bytes=100)
    assert a.allocate(1, 30) and a.allocate(2, 30) and a.allocate(3, 30)
    a.free(1)  # hole [0, 30)
    assert a.allocate(4, 20)
    assert a.regions[4] == (0, 20)
    assert a.holes == [(20, 10), (90, 10)]


def test_fragmentation_makes_a_fitting_total_fail():
    a = ContiguousAllocator(capacity_bytes=100, segment_bytes=100)
    for owner in range(5):
        assert a.allocate(owner, 20)
    a.free(1)
    a.free(3)  # 40 bytes free, but in two 20-byte holes
    assert a.free_bytes == 40 and a.largest_hole == 20
    assert a.fragmentation_bytes() == 20
    assert not a.allocate(9, 30)  # the OOM the article describes
    a.free(2)  # holes merge: [20, 80) is one 60-byte hole
    assert a.holes == [(20, 60)]
    assert a.allocate(9, 30) and a.regions[9] == (20, 30)


def test_pool_grows_by_segments_up_to_the_physical_limit():
    a = ContiguousAllocator(capacity_bytes=100, segment_bytes=40)
    assert a.allocate(1, 30) and a.pool_bytes == 40
    assert a.allocate(2, 30) and a.pool_bytes == 80  # the new segment merges with the tail hole
    assert a.allocate(3, 30) and a.pool_bytes == 100  # last, partial segment
    assert not a.allocate(4, 20)
    assert a.used_bytes == 90 and a.free_bytes == 10
