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

import numpy as np


def longest_prefix(key_to_nodes: dict[int, int], keys: np.ndarray, num_nodes: int) -> np.ndarray:
    """int64 [num_nodes]: pages of `keys`, from the first, that each node holds without a gap."""
    matched = np.zeros(num_nodes, dtype=np.int64)
    alive = (1 << num_nodes) - 1
    get = key_to_nodes.get
    depth = 0
    for key in keys.tolist():
        still = alive & get(key, 0)
        if still != alive:  # some nodes' prefixes end before this page
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

    def on_cache_event(self, event: str, keys: list[int], node: int) -> None:
        """A node stored (indexed) or removed (evicted) these pages."""
        table, bit = self.key_to_nodes, 1 << node
        if event == "stored":
            get = table.get
            for key in keys:
                table[key] = get(key, 0) | bit
            return
        for key in keys:
            holders = table.get(key, 0) & ~bit
            if holders:
                table[key] = holders
            else:
                table.pop(key, None)

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
        # Per node: key -> stamp of the last time a prompt holding it was routed there. Stamps grow
        # with every insert and, within one prompt, from its tail to its first page, so a prefix
        # is always newer than its extensions: dropping the oldest stamps removes leaves before
        # their parents and the tree stays prefix-closed.
        self.node_stamps: list[dict[int, int]] = [{} for _ in range(num_nodes)]
        self._clock = 0

    def matched_pages(self, keys: np.ndarray) -> np.ndarray:
        return longest_prefix(self.key_to_nodes, keys, self.num_nodes)

    def num_pages(self, node: int) -> int:
        return len(self.node_stamps[node])

    def insert(self, keys: np.ndarray, node: int) -> None:
        """The router sent a prompt with these page keys to `node`."""
        table, bit, stamps = self.key_to_nodes, 1 << node, self.node_stamps[node]
        clock = self._clock
        for key in reversed(keys.tolist()):
            if key not in stamps:
                table[key] = table.get(key, 0) | bit
            stamps[key] = clock
            clock += 1
        self._clock = clock

    def trim(self, node: int, max_pages: int) -> int:
        """Drop the node's least recently routed pages until it holds at most max_pages."""
        stamps = self.node_stamps[node]
        excess = len(stamps) - max_pages
        if excess <= 0:
            return 0
        clear = ~(1 << node)
        oldest = sorted(stamps, key=stamps.__getitem__)[:excess]
        for key in oldest:
            del stamps[key]
            holders = self.key_to_nodes[key] & clear
            if holders:
                self.key_to_nodes[key] = holders
            else:
                del self.key_to_nodes[key]
        return excess
