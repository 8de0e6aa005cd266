"""Page pool: FIFO free list, reference counts, immediate vs epoch reclamation, use-after-free detection."""

from __future__ import annotations

import numpy as np
import pytest

from sim.kv.page_pool import CACHED, FREE, RETIRED, USED, PagePool

NOT_INDEXED = np.zeros(8, dtype=bool)


def pool(epoch: bool, window_s: float = 0.0) -> PagePool:
    return PagePool(8, 16, 1024, epoch_reclaim=epoch, race_window_s=window_s)


def test_fifo_free_list_and_refcounts():
    p = pool(epoch=False)
    assert p.allocate(3, 0.0) == [0, 1, 2]
    p.ref_many([1])
    p.unref_many([0, 1, 2], NOT_INDEXED)
    assert p.ref_count[1] == 1 and p.state[1] == USED
    assert list(p.free_pages()) == [3, 4, 5, 6, 7, 0, 2]  # released pages go to the back
    with pytest.raises(AssertionError):
        p.unref_many([0], NOT_INDEXED)  # a count would go negative
    p.check_invariants()


def test_indexed_pages_stay_cached_and_a_hit_revives_them():
    p = pool(epoch=True)
    pages = p.allocate(2, 0.0)
    indexed = np.zeros(8, dtype=bool)
    indexed[pages[0]] = True
    p.unref_many(pages, indexed)
    assert (
        p.state[0] == CACHED and p.state[1] == RETIRED and (p.num_cached, p.num_retired) == (1, 1)
    )
    p.ref_many([0])
    assert p.state[0] == USED and p.num_cached == 0
    p.check_invariants()


def test_epoch_returns_pages_one_whole_step_after_release():
    p = pool(epoch=True)
    pages = p.allocate(8, 0.0)
    p.end_epoch(1.0)  # step 1 ends at 1.0; what its finishes release is retired in epoch 1
    p.unref_many(pages[:2], NOT_INDEXED, last_read_s=1.0)
    assert p.num_retired == 2 and p.num_free == 0 and p.state[0] == RETIRED
    assert p.end_epoch(1.03) == 2 and p.num_free == 2  # step 2 has finished since: reusable
    p.check_invariants()


def test_immediate_reuse_inside_the_race_window_is_a_use_after_free():
    p = pool(epoch=False, window_s=0.005)
    pages = p.allocate(8, 0.0)
    p.unref_many(pages[:1], NOT_INDEXED, last_read_s=1.0)  # its last reader exits at 1.005
    assert p.allocate(1, 1.0) == [0] and p.use_after_free == 1
    p.unref_many([0], NOT_INDEXED, last_read_s=1.0)
    assert p.allocate(1, 1.01) == [0] and p.use_after_free == 1  # after the window: safe


def test_epoch_holds_pages_until_their_readers_exit_then_idle_reclaim_frees_them():
    p = pool(epoch=True, window_s=0.005)
    pages = p.allocate(8, 0.0)
    p.end_epoch(1.0)
    p.unref_many(pages[:1], NOT_INDEXED, last_read_s=1.0)
    assert p.end_epoch(1.002) == 0  # a whole step ended, but the step-1 reader runs until 1.005
    assert p.reclaim_exited(1.004) == 0 and p.idle_reclaim(1.004) == pytest.approx(0.001)
    assert p.idle_reclaim(1.005) == 0.0 and p.num_free == 1
    assert p.allocate(1, 1.005) == [0] and p.use_after_free == 0
    assert p.idle_reclaim(1.006) is None


def test_evicting_a_cached_page_with_a_live_reader_retires_it():
    p = pool(epoch=True, window_s=0.005)
    pages = p.allocate(1, 0.0)
    p.end_epoch(1.0)
    p.unref_many(pages, np.ones(8, dtype=bool), last_read_s=1.0)
    p.evict_many(np.array(pages), now=1.001)
    assert p.state[0] == RETIRED and p.num_cached == 0
    p.evict_many(np.zeros(0, dtype=np.int64), now=1.001)
    assert p.idle_reclaim(1.01) == 0.0 and p.state[0] == FREE
    p.check_invariants()
