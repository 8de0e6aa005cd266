"""The central scheduler's global routing table: prefix page key -> nodes that hold it.

Kept up to date from the nodes' cache events (page stored / page evicted), never guessed, so the
router's view of every node's cache is exact (event delay zero). The holders of a key are a
bitmask (bit i = node i): one int per key keeps updates and prefix walks cheap.
"""

from __future__ import annotations

import numpy as np


class RoutingTable:
    def __init__(self, num_nodes: int):
        self.num_nodes = num_nodes
        self.key_to_nodes: dict[int, int] = {}  # page key -> bitmask of nodes caching it

    def on_cache_event(self, event: str, keys: list[int], node: int) -> None:
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
        """int64 [num_nodes]: length in pages of the cached prefix each node holds for these keys."""
        matched = np.zeros(self.num_nodes, dtype=np.int64)
        alive = (1 << self.num_nodes) - 1
        get = self.key_to_nodes.get
        for depth, key in enumerate(keys.tolist(), start=1):
            still = alive & get(key, 0)
            if still != alive:  # some nodes' prefixes end before this page
                self._record(matched, alive & ~still, depth - 1)
                alive = still
            if not alive:
                break
        self._record(matched, alive, keys.shape[0])
        return matched

    def _record(self, matched: np.ndarray, nodes: int, depth: int) -> None:
        for n in range(self.num_nodes):
            if nodes >> n & 1:
                matched[n] = depth
