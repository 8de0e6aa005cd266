"""Evicted pages are recorded by their position in the prefix (evictions.csv)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from sim.metrics import eviction_frame
from tests.helpers import make_request, submit_at
from tests.sim.test_node import make_node


def test_a_later_request_evicts_the_first_ones_pages_and_their_positions_are_counted():
    # 8 pages. Request 0 (5 full pages + 1 token) finishes; its 5 full pages stay cached. Request 1
    # needs 6 pages, 3 are free: eviction runs, and its batch minimum (64 pages, capped at what is
    # cached) takes all 5 cached pages at once.
    env, node, cache, _ = make_node(num_pages=8)
    submit_at(env, node, 0.0, make_request(0, np.arange(81), output_tokens=1))
    submit_at(env, node, 1.0, make_request(1, np.arange(1000, 1081), output_tokens=1))
    env.run(until=2.0)
    assert cache.num_evicted_pages == 5
    # Depths 1-5: first tokens 0, 16, 32, 48, 64.
    assert cache.evicted_by_depth.tolist() == [0, 1, 1, 1, 1, 1]
    cluster = SimpleNamespace(nodes=[node], page_size=16)
    frame = eviction_frame(cluster, "arm")
    assert frame[
        ["prefix_position_from", "prefix_position_to", "evicted_pages"]
    ].values.tolist() == [[0, 16, 1], [16, 32, 1], [32, 64, 2], [64, 128, 1]]
