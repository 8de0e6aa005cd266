"""The central scheduler's global routing table: prefix page key -> nodes that hold it.

Kept up to date from the nodes' cache events (page stored / page evicted), never guessed, so the
router's view of every node's cache is exact (event delay zero).
"""

from __future__ import annotations

import numpy as np


class RoutingTable:
    def __init__(self, num_nodes: int):
        self.num_nodes = num_nodes
        self.key_to_nodes: dict[int, set[int]] = {}

    def on_cache_event(self, event: str, keys: list[int], node: int) -> None:
        if event == "stored":
            for key in keys:
                self.key_to_nodes.setdefault(key, set()).add(node)
            return
        for key in keys:
            nodes = self.key_to_nodes.get(key)
            if nodes is not None:
                nodes.discard(node)
                if not nodes:
                    del self.key_to_nodes[key]

    def matched_pages(self, keys: np.ndarray) -> np.ndarray:
        """int64 [num_nodes]: length in pages of the cached prefix each node holds for these keys."""
        matched = np.zeros(self.num_nodes, dtype=np.int64)
        alive = set(range(self.num_nodes))
        for k in range(keys.shape[0]):
            holders = self.key_to_nodes.get(int(keys[k]))
            if not holders:
                break
            alive &= holders
            if not alive:
                break
            for node in alive:
                matched[node] = k + 1
        return matched
