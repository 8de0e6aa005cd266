"""Routing over NodeViews (each view built when first read) decides as the rules did over a list
of every view: the reference rules (tests/policies/test_routing_ties.py) are the list versions
the lazy ones replaced."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.params import NoParams
from policies.routing import LeastLoaded, PrefixAffinity, PrefixAffinityParams
from policies.routing_approx import SGLangCacheAware, SGLangCacheAwareParams
from sim.views import NodeView, NodeViews, RouteQuery
from tests.policies.test_routing_ties import reference_affinity, reference_least_loaded

# Few distinct values: ties in outstanding, load and match are common.
VIEW = st.builds(
    lambda waiting, running, used, queued, cached: (waiting, running, used, queued, cached),
    st.integers(0, 3),
    st.integers(0, 3),
    st.sampled_from([0, 500, 900, 1000]),
    st.sampled_from([0, 100]),
    st.sampled_from([0, 16, 32]),
)


def built(rows) -> list[NodeView]:
    return [NodeView(i, w, r, 1000, 1000 - u, u, q, c, 4) for i, (w, r, u, q, c) in enumerate(rows)]


def lazy(views: list[NodeView], reads: list[int]) -> NodeViews:
    """NodeViews over `views` as a router builds them, recording which nodes were read."""

    def view(i: int) -> NodeView:
        reads.append(i)
        return views[i]

    def load(i: int) -> float:
        reads.append(i)
        return views[i].load

    return NodeViews(
        len(views),
        view,
        load,
        lambda: [v.outstanding for v in views],
        lambda: [v.cached_prefix_tokens for v in views],
    )


QUERY = RouteQuery(0, 64, np.arange(4, dtype=np.uint64), 16)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(VIEW, min_size=1, max_size=12),
    st.sampled_from([0.5, 0.9, 1.0]),
    st.booleans(),
    st.sampled_from(["least_loaded", "first"]),
)
def test_prefix_affinity_over_node_views_decides_as_over_the_list(rows, threshold, fallback, tie):
    views = built(rows)
    p = PrefixAffinityParams(load_threshold=threshold, fallback=fallback, tie_break=tie)
    want = reference_affinity(views, [v.cached_prefix_tokens for v in views], p)
    reads: list[int] = []
    assert PrefixAffinity(p, np.random.default_rng(0)).route(QUERY, lazy(views, reads)) == want
    assert PrefixAffinity(p, np.random.default_rng(0)).route(QUERY, views) == want
    assert LeastLoaded(NoParams(), np.random.default_rng(0)).route(
        QUERY, lazy(views, [])
    ) == reference_least_loaded(views)
    assert len(reads) == len(set(reads))  # each node read once


def test_only_the_views_a_rule_weighs_are_built():
    # one holder of the longest match, under the threshold: only its view is read
    views = built([(1, 1, 0, 0, 0), (0, 0, 0, 0, 32), (0, 1, 0, 0, 16), (2, 0, 0, 0, 0)])
    reads: list[int] = []
    assert PrefixAffinity(PrefixAffinityParams(), None).route(QUERY, lazy(views, reads)) == 1
    assert reads == [1]
    # no match: fewest outstanding is node 1 alone, read for nothing else
    reads.clear()
    views = built([(1, 1, 0, 0, 0), (0, 0, 0, 0, 0), (0, 1, 0, 0, 0)])
    assert PrefixAffinity(PrefixAffinityParams(), None).route(QUERY, lazy(views, reads)) == 1
    assert reads == []


def test_node_views_index_like_a_list():
    views = built([(0, 0, 0, 0, 0), (1, 0, 0, 0, 0), (2, 0, 0, 0, 16)])
    nv = NodeViews.of(views)
    assert NodeViews.of(nv) is nv
    assert list(nv) == views and nv[-1] == views[-1] and nv[1:] == views[1:]
    assert nv.outstanding() == [0, 1, 2] and nv.cached_prefix_tokens() == [0, 0, 16]


def test_sglang_reads_outstanding_from_node_views():
    views = built([(40, 0, 0, 0, 0), (0, 0, 0, 0, 0)])  # imbalanced: the least loaded
    policy = SGLangCacheAware(SGLangCacheAwareParams(), np.random.default_rng(0))
    assert policy.route(QUERY, lazy(views, [])) == 1
