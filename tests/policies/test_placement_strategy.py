"""Placement strategies: where pages would go, and the busiest node of a whole request."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.params import NoParams
from policies.placement import Shard, ShardParams, Spill


def test_spill_fills_the_owner_then_the_roomiest_peers():
    prefer = Spill(NoParams()).preferred_nodes(0, (), 0, 7, [3, 5, 2], [1, 2])
    assert prefer == [0, 0, 0, 1, 1, 1, 1]


def test_shard_rotates_stripes_over_its_members():
    shard = Shard(ShardParams(shard_nodes=3, stripe_pages=2))
    members = shard.members(1, [2, 0, 3])
    assert members == (1, 2, 0)
    assert shard.preferred_nodes(1, members, 1, 6, [9] * 4, [2, 0, 3]) == [1, 2, 2, 0, 0, 1]


@settings(max_examples=200, derandomize=True)
@given(st.integers(0, 5000), st.integers(1, 8), st.integers(1, 128), st.integers(1, 16))
def test_busiest_node_matches_counting_every_page(pages, k, stripe, num_nodes):
    shard = Shard(ShardParams(shard_nodes=k, stripe_pages=stripe))
    counted = np.bincount((np.arange(pages) // stripe) % k, minlength=k).max()
    assert shard.busiest_node_pages(pages, num_nodes) == int(counted)
    spill = Spill(NoParams()).busiest_node_pages(pages, num_nodes)
    assert (spill <= 10) == (pages <= 10 * num_nodes)  # fits 10 pages a node iff it fits all
