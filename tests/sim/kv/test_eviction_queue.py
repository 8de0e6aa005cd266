"""Eviction rounds that take their victims from the queue of a full round (lru, lfu, fifo:
priorities time does not move) evict the same pages, in the same order, as ranking every
candidate each round (hypothesis: random prefix trees, hits, idles, batch sizes, protected zone,
epochs with a race window, queues of a few pages)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv.victim_queue import VictimQueue
from tests.sim.kv.test_eviction_shortlist import (
    BATCHES,
    POOL_PAGES,
    RACES,
    SEEDS,
    assert_evicts_as_ranking_all,
    count_rounds,
    new_cache,
)

QUEUED = ("fifo", "lfu", "lru")


def make(policy: str, num_pages: int, batch: int, zone: bool, race_s: float, reserve: int):
    cache = new_cache(policy, num_pages, batch, zone, race_s)
    assert cache._queue is not None  # every time-invariant policy queues
    cache._queue = VictimQueue(reserve)
    return cache


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(QUEUED),
    SEEDS,
    POOL_PAGES,
    BATCHES,
    st.booleans(),
    RACES,
    st.sampled_from([0, 1, 4, 16]),
)
def test_queued_rounds_evict_what_the_full_ranking_evicts(
    policy, seed, num_pages, batch, zone, race_s, reserve
):
    queued = make(policy, num_pages, batch, zone, race_s, reserve)
    full = make(policy, num_pages, batch, zone, race_s, reserve)
    full._queue = None  # the reference: every candidate ranked every round
    assert_evicts_as_ranking_all(queued, full, seed, 60)


def test_most_rounds_take_the_queue():
    rounds = count_rounds(make("lru", 40, 3, False, 0.0, 16), "_queued_victims", 3, 200)
    assert rounds["carried"] > rounds["full"] > 0
