"""SGLang cache-aware and decentralized routing: exact picks from their own routing history."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from policies.routing_approx import (
    Decentralized,
    DecentralizedParams,
    SGLangCacheAware,
    SGLangCacheAwareParams,
)
from sim.views import NodeView, RouteQuery

PAGE = 16


def view(i: int, outstanding: int = 0, cap: int = 10_000) -> NodeView:
    return NodeView(i, outstanding, 0, cap, cap, 0, 0, 0, 256)


def query(keys, now_s: float = 0.0, extra_tokens: int = 0) -> RouteQuery:
    keys = np.asarray(keys, dtype=np.uint64)
    return RouteQuery(0, keys.shape[0] * PAGE + extra_tokens, keys, PAGE, now_s)


def sglang(**params) -> SGLangCacheAware:
    return SGLangCacheAware(SGLangCacheAwareParams.model_validate(params), np.random.default_rng(0))


def test_sglang_defaults_are_the_published_library_and_cli_sets():
    lib = SGLangCacheAwareParams.model_validate({})
    assert (lib.cache_threshold, lib.balance_abs_threshold, lib.balance_rel_threshold) == (
        0.5,
        32,
        1.1,
    )
    assert (lib.eviction_interval_s, lib.max_tree_tokens) == (30.0, 10_000)
    cli = SGLangCacheAwareParams.model_validate({"defaults": "cli", "cache_threshold": 0.4})
    assert (cli.cache_threshold, cli.balance_abs_threshold, cli.balance_rel_threshold) == (
        0.4,
        64,
        1.5,
    )
    assert (cli.eviction_interval_s, cli.max_tree_tokens) == (120.0, 2**26)


@pytest.mark.parametrize(
    "bad",
    [
        {"cache_threshold": 1.5},
        {"balance_rel_threshold": 0.5},
        {"balance_abs_threshold": -1},
        {"defaults": "nightly"},
    ],
)
def test_sglang_rejects_thresholds_out_of_range(bad):
    with pytest.raises(ValidationError):
        SGLangCacheAwareParams.model_validate(bad)


def test_sglang_follows_a_good_match_and_sends_misses_to_the_smallest_tree():
    policy = sglang()
    views = [view(i) for i in range(3)]
    assert policy.route(query([1, 2, 3, 4]), views) == 0  # all trees empty: the first smallest
    assert policy.route(query([1, 2, 3, 4, 5, 6]), views) == 0  # 4 of 6 pages match: 0.67 > 0.5
    assert (
        policy.route(query([1, 2, 7, 8, 9]), views) == 1
    )  # 2 of 5 = 0.4: smallest tree (1, empty)
    assert policy.route(query([20, 21]), views) == 2
    assert (
        policy.route(query([30, 31, 32]), views) == 2
    )  # trees hold 6, 5, 2 pages: node 2 smallest
    assert [policy.tree.num_pages(n) for n in range(3)] == [6, 5, 5]


def test_sglang_match_rate_counts_the_partial_last_page():
    policy = sglang()
    views = [view(0), view(1)]
    policy.route(query([1, 2]), views)  # node 0
    # 2 cached pages = 32 tokens of a 32 + 40 = 72-token prompt: 0.44, not above 0.5
    assert policy.route(query([1, 2], extra_tokens=40), views) == 1


def test_sglang_imbalance_needs_both_thresholds():
    policy = sglang(balance_abs_threshold=2, balance_rel_threshold=1.5)
    policy.route(query([1, 2, 3]), [view(0), view(1)])  # node 0
    # 4 - 1 = 3 > 2 and 4 > 1.5: imbalanced -> least loaded (node 1) despite the full match
    assert policy.route(query([1, 2, 3]), [view(0, 4), view(1, 1)]) == 1
    # 5 - 3 = 2 is not above 2: balanced -> the match (node 0)
    assert policy.route(query([1, 2, 3]), [view(0, 5), view(1, 3)]) == 0
    # 10 - 7 = 3 > 2 but 10 > 1.5 x 7 = 10.5 fails: balanced
    assert policy.route(query([1, 2, 3]), [view(0, 10), view(1, 7)]) == 0


def test_sglang_trims_trees_every_interval():
    policy = sglang(eviction_interval_s=10, max_tree_tokens=3 * PAGE)
    views = [view(0), view(1)]
    policy.route(query([1, 2, 3, 4, 5], now_s=0.0), views)  # node 0 holds 5 pages
    policy.route(query([9], now_s=5.0), views)  # before the interval: no trim
    assert policy.tree.num_pages(0) == 5
    # At t = 10 node 0 is trimmed to its 3 most recent pages (the leaves 5 and 4 go first); 3 of 6
    # pages is a match rate of 0.5, not above 0.5, so the prompt goes to the smaller tree (node 1).
    assert policy.route(query([1, 2, 3, 4, 5, 6], now_s=10.0), views) == 1
    assert policy.tree.matched_pages(np.array([1, 2, 3, 4, 5, 6], dtype=np.uint64)).tolist() == [
        3,
        6,
    ]


def test_decentralized_router_knows_only_its_own_prompts():
    policy = Decentralized(
        DecentralizedParams(num_routers=2, assignment="round_robin"), np.random.default_rng(0)
    )
    keys = [1, 2, 3, 4]
    assert policy.route(query(keys), [view(0), view(1)]) == 0  # router 0: no match, least loaded
    # router 1 never saw the prompt: least loaded, node 1, although node 0 caches it
    assert policy.route(query(keys), [view(0, 1), view(1)]) == 1
    assert policy.route(query(keys), [view(0, 1), view(1, 1)]) == 0  # router 0 remembers node 0
    assert policy.route(query(keys), [view(0, 1), view(1, 2)]) == 1  # router 1 remembers node 1


def test_one_decentralized_router_is_the_central_rule_on_its_own_history():
    policy = Decentralized(DecentralizedParams(num_routers=1), np.random.default_rng(0))
    assert policy.route(query([1, 2]), [view(0), view(1)]) == 0
    assert policy.route(query([1, 2, 3]), [view(0, 3), view(1)]) == 0  # affinity beats load
    full = NodeView(0, 0, 5, 100, 0, 95, 0, 0, 256)  # load 0.95 > 0.9
    assert policy.route(query([1, 2]), [full, view(1, 4)]) == 1
