"""What a router knows of the nodes' caches: page key -> bitmask of the nodes holding that page.

`RoutingTable` is the article's global table, kept exact from the nodes' cache events (pages
stored / removed), never guessed (event delay zero). `ApproxPrefixTable` is what a router without
events knows: the prompts it routed itself, per node, with least-recently-routed pages dropped
when a node's share passes a size cap (SGLang's approximate radix tree, at page granularity: a
chained page key names a whole prefix, so a set of keys per node is a radix tree of pages).

The holders of a key are a bitmask (bit i = node i): one int per key keeps updates and prefix
walks cheap. Both answer `matched_pages(keys)`: per node, the length of the longest prefix of the
prompt it holds, walking from the first page as a cache lookup does.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import compress, repeat

import numpy as np


def longest_prefix(key_to_nodes: dict[int, int], keys: np.ndarray, num_nodes: int) -> np.ndarray:
    """int64 [num_nodes]: pages of `keys`, from the first, that each node holds without a gap.

    Both tables are prefix-closed per node (a cache indexes a page only below its indexed parent
    and evicts children before parents; the approximate tree trims leaves first), so the holders
    of page d shrink as d grows and only the depths where they change need finding: a bisection,
    O(changes x log pages) lookups instead of one per matched page. `longest_prefix_linear` is the
    page-by-page walk it must agree with (tests/sim/test_routing_table.py).
    """
    matched = np.zeros(num_nodes, dtype=np.int64)
    num_keys = keys.shape[0]
    get, item = key_to_nodes.get, keys.item
    first = get(item(0), 0) if num_keys else 0
    stack = [(0, num_keys, first, 0)]  # (lo, hi, holders(lo), holders(hi)); holders(num_keys) = 0
    while stack:
        lo, hi, at_lo, at_hi = stack.pop()
        if at_lo == at_hi:
            continue
        if hi - lo == 1:  # nodes holding page lo but not page hi match exactly lo + 1 pages
            _record(matched, at_lo & ~at_hi, hi)
            continue
        mid = (lo + hi) // 2
        at_mid = get(item(mid), 0) & at_lo  # & at_lo: a node without page lo cannot match past it
        stack.append((lo, mid, at_lo, at_mid))
        stack.append((mid, hi, at_mid, at_hi))
    return matched


def longest_prefix_linear(
    key_to_nodes: dict[int, int], keys: np.ndarray, num_nodes: int
) -> np.ndarray:
    """The same answer by walking every page (no prefix-closure assumption): the reference."""
    matched = np.zeros(num_nodes, dtype=np.int64)
    alive = (1 << num_nodes) - 1
    depth = 0
    for key in keys.tolist():
        still = alive & key_to_nodes.get(key, 0)
        if still != alive:
            _record(matched, alive & ~still, depth)
            alive = still
            if not alive:
                return matched
        depth += 1
    _record(matched, alive, depth)
    return matched


def _record(matched: np.ndarray, nodes: int, depth: int) -> None:
    node = 0
    while nodes:
        if nodes & 1:
            matched[node] = depth
        nodes >>= 1
        node += 1


class RoutingTable:
    """Exact: fed by every node's cache events."""

    def __init__(self, num_nodes: int):
        self.num_nodes = num_nodes
        self.key_to_nodes: dict[int, int] = {}  # page key -> bitmask of nodes caching it
        # One int object per node's bit: a key only one node holds shares it (at hundreds of
        # nodes a bitmask is a ~60-byte int; millions of keys would each hold a copy).
        self._bits = [1 << node for node in range(num_nodes)]

    def on_cache_event(self, event: str, keys: list[int], node: int) -> None:
        """A node stored (indexed) or removed (evicted) these pages."""
        table, bit = self.key_to_nodes, self._bits[node]
        if event == "stored":
            if len(keys) > 1 and table.keys().isdisjoint(keys):  # all new: C-level passes
                table.update(dict.fromkeys(keys, bit))
                return
            put = table.setdefault
            for key in keys:
                holders = put(key, bit)
                if not holders & bit:
                    table[key] = holders | bit
            return
        # Removed: every key popped, those other nodes still hold put back (C-level passes;
        # the same entries as popping and putting back key by key).
        rest = list(map((~bit).__and__, map(table.pop, keys, repeat(0))))
        table.update(zip(compress(keys, rest), filter(None, rest), strict=True))

    def nodes_holding(self, key: int) -> list[int]:
        holders = self.key_to_nodes.get(key, 0)
        return [n for n in range(self.num_nodes) if holders >> n & 1]

    def matched_pages(self, keys: np.ndarray) -> np.ndarray:
        return longest_prefix(self.key_to_nodes, keys, self.num_nodes)


class ApproxPrefixTable:
    """Guessed: the pages of the prompts routed to each node, least recently routed dropped first."""

    def __init__(self, num_nodes: int):
        self.num_nodes = num_nodes
        self.key_to_nodes: dict[int, int] = {}
        # Per node: its keys from least to most recently routed. A prompt's keys are touched tail
        # first, so a prefix is always more recent than its extensions: dropping from the old end
        # removes leaves before their parents, and the tree stays prefix-closed.
        self.node_keys: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(num_nodes)]

    def matched_pages(self, keys: np.ndarray) -> np.ndarray:
        return longest_prefix(self.key_to_nodes, keys, self.num_nodes)

    def num_pages(self, node: int) -> int:
        return len(self.node_keys[node])

    def insert(self, keys: np.ndarray, node: int) -> None:
        """The router sent a prompt with these page keys to `node`."""
        table, bit, recent = self.key_to_nodes, 1 << node, self.node_keys[node]
        touch = recent.move_to_end
        for key in reversed(keys.tolist()):
            if key in recent:
                touch(key)
            else:
                recent[key] = None
                table[key] = table.get(key, 0) | bit

    def trim(self, node: int, max_pages: int) -> int:
        """Drop the node's least recently routed pages until it holds at most max_pages."""
        recent, clear = self.node_keys[node], ~(1 << node)
        excess = max(0, len(recent) - max_pages)
        for _ in range(excess):
            key, _ = recent.popitem(last=False)
            holders = self.key_to_nodes[key] & clear
            if holders:
                self.key_to_nodes[key] = holders
            else:
                del self.key_to_nodes[key]
        return excess
