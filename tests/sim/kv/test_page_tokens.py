"""`PageTokens` holds every page's ids exactly, whichever form a page takes (a 17th-bit mask or a
row of high halves): checked against a plain int32 table over hypothesis sequences of writes and
comparisons, with ids from the vocabulary, 31-bit generated ids and negative ones mixed, with the
C loops (sim/_pagetokens.c, when the native build is in use) and with numpy alone."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv.page_tokens import PageTokens

NUM_PAGES = 6
EDGES = np.array([0, 1, 2**16 - 1, 2**16, 2**17 - 1, 2**17, 2**31 - 1, -1, -(2**31)], np.int64)


def page_ids(page_size: int, kind: str, seed: int) -> list[int]:
    """One page's ids: vocabulary ids, with the forms' edge values mixed in, or any int32 ids
    (31-bit generated ids, negative ones). Drawn from a seed: a page of 64 hypothesis draws
    would pass its health check's bound on the data a test may take."""
    rng = np.random.default_rng(seed)
    if kind == "vocabulary":
        return rng.integers(0, 2**17, page_size).tolist()
    if kind == "edges":
        ids = rng.integers(0, 2**17, page_size)
        spots = rng.random(page_size) < 0.3
        ids[spots] = rng.choice(EDGES, int(spots.sum()))
        return ids.tolist()
    return rng.integers(-(2**31), 2**31, page_size).tolist()


@st.composite
def operations(draw, page_size: int):
    ops = []
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["one", "many", "same"]))
        pages = draw(st.lists(st.integers(0, NUM_PAGES - 1), min_size=1, max_size=4, unique=True))
        kinds = st.sampled_from(["vocabulary", "edges", "any"])
        rows = [page_ids(page_size, draw(kinds), draw(st.integers(0, 2**16))) for _ in pages]
        ops.append((kind, pages, rows))
    return ops


@pytest.mark.parametrize("page_size", [1, 4, 16, 31, 32, 63, 64])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_page_tokens_match_a_plain_table(page_size, data):
    # the C loops (when built) and numpy side by side: the same answers and the same arrays
    tables = [PageTokens(NUM_PAGES, page_size), PageTokens(NUM_PAGES, page_size, compiled=False)]
    plain = np.zeros((NUM_PAGES, page_size), dtype=np.int32)
    for kind, pages, rows in data.draw(operations(page_size)):
        ids = np.array(rows, dtype=np.int32)
        if kind == "one":
            for table in tables:
                table.write_one(pages[0], ids[0])
            plain[pages[0]] = ids[0]
        elif kind == "many":
            for table in tables:
                table.write(np.array(pages), ids)
            plain[pages] = ids
        else:
            # half the probes ask about the ids a page holds, half about other ids
            probe = np.where(np.arange(len(pages))[:, None] % 2 == 0, plain[pages], ids)
            expected = (plain[pages] == probe).all(axis=1).tolist()
            for table in tables:
                assert table.same(np.array(pages), probe).tolist() == expected
                equal = [table.equal(p, row) for p, row in zip(pages, probe, strict=True)]
                assert equal == expected
        for table in tables:
            assert table.tokens(np.arange(NUM_PAGES)).tolist() == plain.tolist()
            assert table.rows_in_use() <= NUM_PAGES  # rows are given back
        c, numpy = tables
        for name in ("low", "mask", "rows", "_free", "_num_free"):
            assert getattr(c, name).tolist() == getattr(numpy, name).tolist()


@pytest.mark.parametrize("compiled", [True, False])
def test_a_vocabulary_page_takes_no_row(compiled):
    table = PageTokens(4, 16, compiled)
    ids = np.arange(2**17 - 16, 2**17, dtype=np.int32)
    table.write(np.array([0, 1]), np.stack([ids, ids - 2**16]))
    table.write_one(2, ids[::-1].copy())
    assert table.mask[:3].tolist() == [0xFFFF, 0, 0xFFFF]
    assert len(table.rows) == 0
    assert table.low.nbytes + table.mask.nbytes == 4 * (16 * 2 + 4)


@pytest.mark.parametrize("compiled", [True, False])
def test_a_generated_page_takes_a_row_and_gives_it_back(compiled):
    table = PageTokens(2, 4, compiled)
    generated = np.array([2**30 + 5, 7, 2**17, 3], dtype=np.int32)
    table.write_one(0, generated)
    assert table.mask[0] == -1
    assert table.tokens(0).tolist() == generated.tolist()
    table.write_one(0, np.array([1, 2, 3, 4], dtype=np.int32))  # rewritten: the row is free
    assert table.mask[0] == 0
    table.write_one(1, generated)
    assert table.mask[1] == -1  # the same row again
    assert table.same(np.array([0, 1]), np.stack([np.arange(1, 5), generated])).tolist() == [
        True,
        True,
    ]
    # a page differing only in one id's high half
    assert not table.equal(1, generated + np.array([2**16, 0, 0, 0], dtype=np.int32))


def test_the_native_build_uses_the_c_loops():
    from sim import native

    if native.c_extension("sim._pagetokens") is None:
        pytest.skip("no native build in use")
    assert PageTokens(2, 4)._c is not None


@pytest.mark.parametrize("compiled", [True, False])
def test_ids_of_another_type_or_strided_are_converted(compiled):
    table = PageTokens(3, 4, compiled)
    wide = np.array([1, 2**20, 3, 4], dtype=np.int64)
    strided = np.arange(8, dtype=np.int32)[::2]
    table.write_one(0, wide)
    table.write_one(1, strided)
    table.write(np.array([2]), wide.reshape(1, 4))
    assert table.tokens(np.arange(3)).tolist() == [wide.tolist(), [0, 2, 4, 6], wide.tolist()]
    assert table.same(np.array([0, 1]), np.stack([wide, strided.astype(np.int64)])).all()
