"""Two-level index (hash screen + exact tokens), hash-only mode, and the radix tree, on tiny exact cases."""

from __future__ import annotations

import numpy as np
import pytest

from sim.kv.hashing import page_keys
from sim.kv.index_base import ROOT
from sim.kv.prefix_index import TwoLevelIndex
from sim.kv.radix_index import RadixIndex

PAGE = 4


def prompt(*pages: int) -> np.ndarray:
    """One page of tokens [v, v+1, v+2, v+3] per value."""
    return np.concatenate([np.arange(v, v + PAGE) for v in pages]).astype(np.int32)


def insert(
    index,
    pages: list[int],
    tokens: np.ndarray,
    keys: np.ndarray,
    parent: int = ROOT,
    first: int = 0,
) -> int:
    """How many of `pages` were indexed."""
    rows = tokens[first * PAGE : (first + len(pages)) * PAGE].reshape(len(pages), PAGE)
    return len(index.insert_chain(pages, keys[first : first + len(pages)].tolist(), parent, rows))


@pytest.mark.parametrize("make", [lambda: TwoLevelIndex(16, PAGE), lambda: RadixIndex(16, PAGE)])
def test_longest_prefix_match_and_children(make):
    index = make()
    a = prompt(0, 10, 20)
    ka = page_keys(a, PAGE)
    assert insert(index, [5, 6, 7], a, ka) == 3
    b = prompt(0, 10, 30, 40)  # shares two pages with a
    m = index.match(page_keys(b, PAGE), b, max_pages=4)
    assert m.pages == [5, 6] and m.false_hits == 0
    assert index.match(ka, a, max_pages=2).pages == [5, 6]  # never more than max_pages
    assert insert(index, [8, 9], b, page_keys(b, PAGE), parent=6, first=2) == 2
    assert index.num_children[6] == 2 and list(index.children(6)) == [7, 8]
    assert list(index.depth[[5, 6, 7, 8, 9]]) == [1, 2, 3, 3, 4]
    assert list(index.prefix_pages[[5, 6, 7, 8, 9]]) == [4, 4, 3, 4, 4]
    assert insert(index, [10], a, ka) == 0  # the same first page under another id: duplicate
    assert list(index.remove(6)) == [7, 8] and not index.indexed[6]
    assert index.match(ka, a, 3).pages == [5] and len(index) == 4


def colliding_keys(tokens: np.ndarray) -> np.ndarray:
    """Short keys that collide with every other prompt's: the article's narrow level-1 hash."""
    return np.zeros(tokens.size // PAGE, dtype=np.uint64)


def test_two_level_catches_the_false_hit_and_indexes_both_colliding_prompts():
    index = TwoLevelIndex(16, PAGE)
    a, b = prompt(0, 10), prompt(50, 60)
    ka, kb = colliding_keys(a), colliding_keys(b)
    assert insert(index, [1, 2], a, ka) == 2
    assert index.key_to_page == {0: 1} and index.overflow == {(0, 1): [2]}  # a collides with itself
    m = index.match(kb, b, 2)
    assert m.pages == [] and m.false_hits == 1 and m.wrong_reuse_tokens == 0
    assert insert(index, [3, 4], b, kb) == 2  # collides: goes to the overflow, still indexed
    assert index.match(kb, b, 2).pages == [3, 4] and index.match(ka, a, 2).pages == [1, 2]
    index.remove(4), index.remove(3)
    assert index.match(kb, b, 2).pages == [] and index.overflow == {(0, 1): [2]}


def test_hash_only_reuses_the_colliding_pages_and_counts_the_wrong_tokens():
    index = TwoLevelIndex(16, PAGE, verify_tokens=False)
    a, b = prompt(0, 10, 20), prompt(50, 60)
    assert insert(index, [1, 2, 3], a, colliding_keys(a)) == 1  # pages 2, 3 trusted to be page 1
    m = index.match(colliding_keys(b), b, 2)
    # Key 0 points at page 1 at both positions: a block table cannot list one page twice.
    assert m.pages == [1] and m.false_hits == 1 and m.wrong_reuse_tokens == PAGE
    assert insert(index, [4, 5], b, colliding_keys(b)) == 0  # the key is taken: trusted as cached


def test_hash_only_chains_go_on_under_the_trusted_holder():
    index = TwoLevelIndex(16, PAGE, verify_tokens=False)
    a = prompt(0, 10, 20)
    keys = np.array([7, 7, 9], dtype=np.uint64)  # page 2 collides with page 1 of its own prompt
    rows = a.reshape(3, PAGE)
    assert index.insert_chain([1, 2, 3], keys.tolist(), ROOT, rows) == [0, 2]
    assert index.parent[3] == 1 and index.depth[3] == 2 and not index.indexed[2]
    assert index.stand_in(7) == 1 and TwoLevelIndex(4, PAGE).stand_in(7) is None


def test_hash_only_is_exact_without_collisions():
    index = TwoLevelIndex(16, PAGE, verify_tokens=False)
    a = prompt(0, 10)
    insert(index, [1, 2], a, page_keys(a, PAGE))
    m = index.match(page_keys(a, PAGE), a, 2)
    assert m.pages == [1, 2] and m.false_hits == 0 and m.wrong_reuse_tokens == 0


def test_radix_never_has_a_false_hit_whatever_the_keys():
    index = RadixIndex(16, PAGE)
    a, b = prompt(0, 10), prompt(0, 60)
    insert(index, [1, 2], a, colliding_keys(a))
    assert insert(index, [3], b, colliding_keys(b), parent=1, first=1) == 1
    m = index.match(colliding_keys(b), b, 2)
    assert m.pages == [1, 3] and m.false_hits == 0


def test_entry_bytes_model():
    assert TwoLevelIndex(4, 16).entry_bytes == 16 + 40 + 64  # slot + links/stats + token copy
    assert TwoLevelIndex(4, 16, verify_tokens=False).entry_bytes == 16 + 40  # hash only: no tokens
    assert RadixIndex(4, 16).entry_bytes == 16 + 40 + 64
