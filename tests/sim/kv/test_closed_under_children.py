"""`closed_under_children` (one mark per page, child counts added up) answers what its
definition says: every indexed child of every page of the set is in the set."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv.index_base import ROOT
from sim.kv.prefix_index import TwoLevelIndex

NUM_PAGES = 20


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, NUM_PAGES), min_size=1, max_size=NUM_PAGES),
    st.lists(st.booleans(), min_size=NUM_PAGES, max_size=NUM_PAGES),
)
def test_closed_under_children_is_its_definition(parent_choices, in_set):
    index = TwoLevelIndex(NUM_PAGES, 1)
    for page, choice in enumerate(parent_choices):  # page hangs under an earlier page or ROOT
        parent = ROOT if choice >= page else choice
        index._link([page], [page], parent)
    pages = np.array([p for p in range(len(parent_choices)) if in_set[p]], dtype=np.int64)
    chosen = set(pages.tolist())
    want = all(
        child in chosen
        for page in chosen
        for child in np.flatnonzero((index.parent == page) & index.indexed).tolist()
    )
    assert index.closed_under_children(pages) == want
