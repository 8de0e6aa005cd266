"""NodeViews.loads: a tie's loads read in one batch equal each view's load, and only the nodes
not read yet are read (issue 18: a third of 256 nodes tie on outstanding requests)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.routing import least_loaded_index
from sim.views import NodeView, NodeViews
from tests.policies.test_node_views import VIEW, built


@settings(max_examples=300, deadline=None)
@given(
    st.lists(VIEW, min_size=1, max_size=12),
    st.lists(st.integers(0, 11), max_size=6),  # views built first
    st.lists(st.integers(0, 11), max_size=6),  # loads read first
    st.lists(st.integers(0, 11), max_size=12),  # the batch
)
def test_loads_in_one_batch_equal_each_views_load(rows, shown, loaded, batch):
    views: list[NodeView] = built(rows)
    n = len(views)
    read: list[list[int]] = []
    lazy = NodeViews(
        n,
        views.__getitem__,
        lambda i: views[i].load,
        lambda: [v.outstanding for v in views],
        lambda: [v.cached_prefix_tokens for v in views],
        lambda ats: read.append(list(ats)) or [views[i].load for i in ats],
    )
    for i in shown:
        lazy[i % n]
    for i in loaded:
        lazy.load(i % n)
    positions = [i % n for i in batch]
    before = {i for i in range(n) if lazy._loads[i] is not None or lazy._views[i] is not None}
    assert lazy.loads(positions) == [views[i].load for i in positions]
    assert all(i not in before for ats in read for i in ats)  # nothing read twice
    assert least_loaded_index(lazy) == least_loaded_index(views)
