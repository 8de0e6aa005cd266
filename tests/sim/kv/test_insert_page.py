"""`insert_page` (one generated page, scalar writes) leaves every index as `insert_chain` of that
page does: the same answer, links, level-1 slots, overflow, token copies and prefix depths,
including taken keys (narrow keys collide), duplicates and hash_only's trusted holders."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv.index_base import ROOT
from sim.kv.prefix_index import TwoLevelIndex
from sim.kv.radix_index import RadixIndex

PAGE = 2
NUM_PAGES = 24
MAKERS = {
    "two_level": lambda: TwoLevelIndex(NUM_PAGES, PAGE),
    "hash_only": lambda: TwoLevelIndex(NUM_PAGES, PAGE, verify_tokens=False),
    "radix": lambda: RadixIndex(NUM_PAGES, PAGE),
}

# (page, parent choice, token value, key) per insert; parent choice picks among indexed pages
inserts = st.lists(
    st.tuples(
        st.integers(0, NUM_PAGES - 1),
        st.integers(0, NUM_PAGES),
        st.integers(0, 2),
        st.integers(0, 3),
    ),
    max_size=40,
)


def state(index) -> tuple:
    arrays = (index.page_key, index.parent, index.depth, index.indexed, index.num_children)
    out = [a.tolist() for a in arrays] + [index.prefix_pages.tolist(), index.num_indexed]
    if isinstance(index, TwoLevelIndex):
        out += [sorted(index.key_to_page.items()), sorted(index.overflow.items())]
        out += [index.page_tokens.tokens(np.arange(NUM_PAGES)).tolist(), index.overflow_used]
    else:
        out += [sorted((k, sorted(v.items())) for k, v in index.edges.items())]
    return tuple(out)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(MAKERS)), inserts)
def test_insert_page_is_a_one_page_chain(kind, ops):
    chain, single = MAKERS[kind](), MAKERS[kind]()
    for page, choice, value, key in ops:
        if chain.indexed[page]:
            continue  # the cache indexes a page it holds and has not indexed yet
        indexed = np.flatnonzero(chain.indexed).tolist()
        parent = ([ROOT, *indexed])[choice % (len(indexed) + 1)]
        if parent == page:
            continue
        tokens = np.full(PAGE, value, dtype=np.int32)
        placed = chain.insert_chain([page], [key], parent, tokens.reshape(1, PAGE))
        assert single.insert_page(page, key, parent, tokens) == bool(placed)
        assert state(single) == state(chain)
