"""PagePool.take (a decode span's sync takes its pages without the use-after-free test when no
old reader can still run) against allocate_at, which tests each page: the same pages, the same
pool state, on a ring that wraps and after releases inside a race window."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv.page_pool import PagePool


def pool_state(pool: PagePool) -> tuple:
    return (
        pool.free_pages().tolist(),
        pool.ref_count.tolist(),
        pool.state.tolist(),
        pool.num_free,
        pool.num_used,
        pool.use_after_free,
    )


@settings(max_examples=200, deadline=None)
@given(
    rounds=st.lists(
        st.tuples(st.integers(1, 12), st.integers(0, 12), st.floats(0.0, 2.0)), max_size=12
    ),
    race=st.sampled_from([0.0, 0.5]),
)
def test_take_is_allocate_at_when_no_reader_runs(rounds, race):
    pools = [PagePool(16, 4, 64, epoch_reclaim=False, race_window_s=race) for _ in range(2)]
    held: list[list[int]] = [[], []]
    now = 0.0
    for take_n, release_n, dt in rounds:
        now += dt
        for i, pool in enumerate(pools):
            n = min(take_n, pool.num_free)
            if i == 0 or now < pool.read_until_max:  # the reference, or a reader may run
                pages = pool.allocate_at([now] * n)[0]
            else:
                pages = pool.take(n)
            held[i] += pages
            gone, held[i] = held[i][:release_n], held[i][release_n:]
            pool.unref_many(gone, np.zeros(16, dtype=bool), now)
        assert pool_state(pools[0]) == pool_state(pools[1])
