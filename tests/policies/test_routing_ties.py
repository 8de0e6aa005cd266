"""The least-loaded rule counts requests first and computes loads only where counts tie: the same
node as the lexicographic minimum of (outstanding, load, index) over every view (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.routing import PrefixAffinityParams, affinity_choice, least_loaded_index
from sim.views import NodeView


def reference_least_loaded(views: list[NodeView], among: list[int] | None = None) -> int:
    indices = range(len(views)) if among is None else among
    return min(indices, key=lambda i: (views[i].outstanding, views[i].load, i))


def reference_affinity(views: list[NodeView], matched: list[int], p: PrefixAffinityParams) -> int:
    longest = max(matched)
    if longest == 0:
        return reference_least_loaded(views)
    holders = [i for i, m in enumerate(matched) if m == longest]
    best = holders[0] if p.tie_break == "first" else reference_least_loaded(views, holders)
    if p.fallback and views[best].load > p.load_threshold:
        return reference_least_loaded(views)
    return best


# Few distinct values, so counts and loads tie often.
node_views = st.lists(
    st.tuples(
        st.integers(0, 3),  # waiting
        st.integers(0, 3),  # running
        st.sampled_from([0, 100, 1000]),  # KV capacity tokens (0: the max(1, .) guard)
        st.integers(0, 1200),  # used tokens
        st.integers(0, 400),  # waiting prompt tokens
        st.sampled_from([0, 16, 32]),  # cached prefix tokens
        st.sampled_from([1, 4, 256]),  # max_num_seqs
    ),
    min_size=1,
    max_size=12,
)


def build(rows: list[tuple]) -> list[NodeView]:
    return [
        NodeView(i, w, r, cap, max(0, cap - used), used, queued, cached, seqs)
        for i, (w, r, cap, used, queued, cached, seqs) in enumerate(rows)
    ]


@settings(max_examples=400, deadline=None)
@given(node_views, st.data())
def test_least_loaded_matches_the_lexicographic_minimum(rows, data):
    views = build(rows)
    assert least_loaded_index(views) == reference_least_loaded(views)
    among = sorted(data.draw(st.sets(st.integers(0, len(views) - 1), min_size=1)))
    assert least_loaded_index(views, among) == reference_least_loaded(views, among)


@settings(max_examples=400, deadline=None)
@given(
    node_views,
    st.floats(0.05, 1.0),
    st.booleans(),
    st.sampled_from(["least_loaded", "first"]),
)
def test_affinity_choice_matches_the_reference(rows, threshold, fallback, tie_break):
    views = build(rows)
    p = PrefixAffinityParams(load_threshold=threshold, fallback=fallback, tie_break=tie_break)
    matched = [v.cached_prefix_tokens for v in views]
    assert affinity_choice(views, matched, p) == reference_affinity(views, matched, p)
