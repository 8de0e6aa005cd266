"""The protected zone's count of hot pages (which lets a round skip the pool scan when it is 0)
always equals a scan of the counts (hypothesis: random requests, window slides, removals)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv.protected_zone import ProtectedZone


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.floats(0.1, 1.0))
def test_hot_count_equals_the_scan(seed, window, share):
    rng = np.random.default_rng(seed)
    zone = ProtectedZone(24, share, window, 8)
    for _ in range(60):
        if rng.random() < 0.2:
            zone.on_removed(rng.choice(24, size=int(rng.integers(1, 6)), replace=False))
        else:
            zone.on_request(sorted(rng.choice(24, size=int(rng.integers(0, 8)), replace=False)))
        assert zone.num_hot == int(np.count_nonzero(zone.counts >= zone.min_count))
        assert zone.pages(np.zeros(24, dtype=np.int64)).size == min(zone.num_hot, 8)
