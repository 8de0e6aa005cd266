"""Routing policies on hand-built node views: the exact node each rule picks."""

from __future__ import annotations

import numpy as np
import pytest

from policies.routing import (
    KVCost,
    KVCostParams,
    LeastKV,
    LeastLoaded,
    NoParams,
    PrefixAffinity,
    PrefixAffinityParams,
    Random,
    RoundRobin,
    WeightedScorers,
    WeightedScorersParams,
    softmax_pick,
)
from sim.views import NodeView, RouteQuery, node_load

PAGE = 16


def view(
    i: int,
    waiting: int = 0,
    running: int = 0,
    cap: int = 1000,
    free: int = 1000,
    used: int = 0,
    queued_tokens: int = 0,
    cached: int = 0,
    seqs: int = 256,
) -> NodeView:
    return NodeView(i, waiting, running, cap, free, used, queued_tokens, cached, seqs)


def query(prompt_tokens: int = 160, now_s: float = 0.0) -> RouteQuery:
    keys = np.arange(1, prompt_tokens // PAGE + 1, dtype=np.uint64)
    return RouteQuery(0, prompt_tokens, keys, PAGE, now_s)


def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def test_load_is_the_larger_of_kv_and_seq_demand():
    assert view(0, running=2, used=300, queued_tokens=200).load == pytest.approx(0.5)
    assert view(0, waiting=3, running=1, seqs=5).load == pytest.approx(0.8)  # 4 of 5 slots
    assert view(0, used=900, queued_tokens=900).load == 1.0  # capped
    assert node_load(0, 0, 0, 0, 0) == 0.0  # empty node with no capacity: no division by zero


def test_round_robin_cycles_and_random_follows_the_seeded_generator():
    rr = RoundRobin(NoParams(), rng())
    views = [view(i) for i in range(3)]
    assert [rr.route(query(), views) for _ in range(5)] == [0, 1, 2, 0, 1]
    picks = [Random(NoParams(), rng()).route(query(), views) for _ in range(1)]
    assert picks == [int(rng().integers(3))]


def test_least_loaded_counts_outstanding_then_load_then_index():
    views = [
        view(0, waiting=2),
        view(1, running=1, used=500),
        view(2, waiting=1, used=10),
        view(3, running=1),
    ]
    assert (
        LeastLoaded(NoParams(), rng()).route(query(), views) == 3
    )  # 1 outstanding and the lowest load


def test_least_kv_takes_the_most_free_kv():
    views = [view(0, free=300), view(1, free=700, waiting=5), view(2, free=700, waiting=1)]
    assert LeastKV(NoParams(), rng()).route(query(), views) == 2


def test_prefix_affinity_follows_the_longest_cached_prefix():
    views = [view(0, cached=32), view(1, cached=96, waiting=4), view(2)]
    assert PrefixAffinity(PrefixAffinityParams(), rng()).route(query(), views) == 1


def test_prefix_affinity_breaks_equal_matches_by_load():
    views = [view(0, cached=64, waiting=3), view(1, cached=64, waiting=1), view(2, waiting=0)]
    assert PrefixAffinity(PrefixAffinityParams(), rng()).route(query(), views) == 1


def test_prefix_affinity_first_tie_break_takes_the_lowest_holder():
    views = [view(0, waiting=9), view(1, cached=64, waiting=3), view(2, cached=64, waiting=1)]
    first = PrefixAffinity(PrefixAffinityParams(tie_break="first"), rng())
    assert first.route(query(), views) == 1


def test_prefix_affinity_without_a_match_goes_to_the_least_loaded():
    views = [view(0, waiting=2), view(1, waiting=1), view(2, waiting=1, used=10)]
    assert PrefixAffinity(PrefixAffinityParams(), rng()).route(query(), views) == 1


def test_prefix_affinity_falls_back_above_the_load_threshold_only_when_enabled():
    hot = view(0, cached=128, running=5, used=950)  # load 0.95 > 0.9
    views = [hot, view(1, waiting=2), view(2, waiting=1)]
    assert PrefixAffinity(PrefixAffinityParams(), rng()).route(query(), views) == 2
    assert PrefixAffinity(PrefixAffinityParams(fallback=False), rng()).route(query(), views) == 0
    at_threshold = [view(0, cached=128, used=900), view(1)]  # load exactly 0.9 is not above it
    assert PrefixAffinity(PrefixAffinityParams(), rng()).route(query(), at_threshold) == 0


def test_kv_cost_is_overlap_weighted_prefill_plus_active_blocks():
    # 160-token prompt = 10 blocks. Node 0: 0 cached -> prefill 10, active 0 + 10 = 10 -> cost 20.
    # Node 1: 128 cached -> prefill 2, active (320 + 160) / 16 + 10 = 40 -> cost 42.
    # Node 2: 96 cached -> prefill 4, active 64 / 16 + 10 = 14 -> cost 18.
    views = [view(0), view(1, cached=128, used=320, queued_tokens=160), view(2, cached=96, used=64)]
    policy = KVCost(KVCostParams(), rng())
    assert policy.costs(query(), views).tolist() == [20.0, 42.0, 18.0]
    assert policy.route(query(), views) == 2
    heavy_prefix = KVCost(KVCostParams(overlap_weight=4.0), rng())  # 50, 48, 30
    assert heavy_prefix.costs(query(), views).tolist() == [50.0, 48.0, 30.0]
    no_prefix = KVCost(KVCostParams(overlap_weight=0.0), rng())  # pure load: 10, 40, 14
    assert no_prefix.route(query(), views) == 0


def test_kv_cost_softmax_samples_by_normalised_cost():
    views = [view(0), view(1, cached=128, used=320, queued_tokens=160), view(2, cached=96, used=64)]
    policy = KVCost(KVCostParams(temperature=0.5), np.random.default_rng(3))
    picks = np.bincount([policy.route(query(), views) for _ in range(3000)], minlength=3) / 3000
    # normalised costs (c - min) / range = 2/24, 1, 0 -> weights exp(-x / 0.5)
    weights = np.exp(-np.array([2 / 24, 1.0, 0.0]) / 0.5)
    assert picks == pytest.approx(weights / weights.sum(), abs=0.03)


def test_softmax_pick_with_equal_scores_is_uniform():
    picks = np.bincount(
        [softmax_pick(np.ones(4), 1.0, np.random.default_rng(s)) for s in range(4000)], minlength=4
    )
    assert picks / 4000 == pytest.approx([0.25] * 4, abs=0.03)


def test_weighted_scorers_sums_prefix_queue_and_kv_scores():
    # prefix share: 0, 0.8, 0.4; queue (max 4, min 0): 1, 0, 0.5; KV free share: 1, 0.5, 0.9
    views = [
        view(0),
        view(1, cached=128, waiting=4, used=500),
        view(2, cached=64, waiting=2, used=100),
    ]
    policy = WeightedScorers(WeightedScorersParams(), rng())
    assert policy.scores(query(), views).tolist() == pytest.approx([4.0, 3.4, 4.0])
    # 0 and 2 tie at 4.0: the seeded generator picks among the tied
    assert policy.route(query(), views) in (0, 2)
    prefix_heavy = WeightedScorers(WeightedScorersParams(prefix_weight=10), rng())  # 4, 9, 6.8
    assert prefix_heavy.route(query(), views) == 1


def test_weighted_scorers_ties_are_seeded():
    views = [view(i) for i in range(4)]
    a = [
        WeightedScorers(WeightedScorersParams(), np.random.default_rng(5)).route(query(), views)
        for _ in range(3)
    ]
    b = [
        WeightedScorers(WeightedScorersParams(), np.random.default_rng(5)).route(query(), views)
        for _ in range(3)
    ]
    assert a == b and set(a) <= {0, 1, 2, 3}
