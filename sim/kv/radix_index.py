"""Radix-tree prefix index (SGLang's RadixCache shape), token-exact by construction.

Every cached page is a tree node; its edge from the parent is labelled with the page's token ids
(a bytes copy, so a finished prompt can be freed). A lookup follows edges from the root, one page
at a time, by dictionary lookup on the exact token bytes: there is no hash to collide (a dict
compares the bytes in full on a hash match), so it never has a false hit and never reuses wrong
KV. Edges are one page long (SGLang with page_size > 1 keys children by page-aligned token runs
as well); chains are not compressed into multi-page edges, which changes the node count, not
which prefixes match. Same interface as `prefix_index.TwoLevelIndex`; `keys` are ignored for
matching and only recorded for the routing table's events.
"""

from __future__ import annotations

import numpy as np

from sim.kv.index_base import ROOT, IndexBase, Match


class RadixIndex(IndexBase):
    def __init__(self, num_pages: int, page_size: int):
        super().__init__(num_pages, page_size)
        self.edges: dict[
            int, dict[bytes, int]
        ] = {}  # parent page (ROOT too) -> {page tokens: child}
        self.edge_of: list[bytes | None] = [None] * num_pages

    def match(self, keys: np.ndarray, prompt: np.ndarray, max_pages: int) -> Match:
        """Longest cached prefix of `prompt`, at most max_pages pages."""
        width = self.page_size * prompt.itemsize
        data = prompt[: max_pages * self.page_size].tobytes()
        pages: list[int] = []
        node = ROOT
        edges = self.edges
        for k in range(len(data) // width):
            children = edges.get(node)
            if children is None:
                break
            child = children.get(data[k * width : (k + 1) * width])
            if child is None:
                break
            pages.append(child)
            node = child
        return Match(pages=pages)

    def insert_chain(
        self, pages: list[int], keys: list[int], parent: int, tokens: np.ndarray
    ) -> list[int]:
        """Index consecutive full pages under `parent`; stop at an edge that already exists.
        Returns the positions (in `pages`) indexed: a leading run."""
        count = 0
        node = parent
        for page, row in zip(pages, tokens, strict=True):
            label = row.tobytes()
            children = self.edges.setdefault(node, {})
            if label in children:
                break  # the same tokens are cached under another page id: a duplicate
            children[label] = page
            self.edge_of[page] = label
            node = page
            count += 1
        if count:
            self._link(pages[:count], keys[:count], parent)
        return list(range(count))

    def _forget(self, pages: np.ndarray, keys: list[int]) -> None:
        edges, edge_of = self.edges, self.edge_of
        for page, parent in zip(pages.tolist(), self.parent[pages].tolist(), strict=True):
            siblings = edges.get(parent)
            if siblings is not None:  # None: the parent went first
                del siblings[edge_of[page]]
                if not siblings:
                    del edges[parent]
            edges.pop(page, None)
            edge_of[page] = None
