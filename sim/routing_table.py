"""What a router knows of the nodes' caches: page key -> bitmask of the nodes holding that page.

`RoutingTable` is the article's global table, kept exact from the nodes' cache events (pages
stored / removed), never guessed (event delay zero). `ApproxPrefixTable` is what a router without
events knows: the prompts it routed itself, per node, with least-recently-routed pages dropped
when a node's share passes a size cap (SGLang's approximate radix tree, at page granularity: a
chained page key names a whole prefix, so a set of keys per node is a radix tree of pages).

The holders of a key are a bitmask (bit i = node i): one int per key keeps updates and prefix
walks cheap. `RoutingTable` keeps its entries in numpy arrays (`sim/holder_table.py`: the same
mapping; at 256 nodes a dict of its ~9M keys took ~670 MB, the arrays ~170 MB). Both answer `matched_pages(keys)`: per node, the length of the longest prefix of the
prompt it holds, walking from the first page as a cache lookup does.

Up to DIRECT_MAX_NODES nodes, `RoutingTable` keeps no entries for a node whose index it may read
(`watch`): a two-level index's level 1 holds exactly the keys its events would have left in the
table (each indexed page holds its own key's slot) until a page first goes to its overflow, so
the bisection, reading each probed key's holders from the kept entries and those level-1 dicts,
gives the same matches as the table, without an entry update per page stored or evicted. From a
node's first overflow page on, its entries are kept from its events again, starting from its
level 1 as it then is (what its events had left).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from sim.holder_table import HolderTable
from sim.kv.prefix_index import TwoLevelIndex

# Reading the slots costs a dict probe per node per key the bisection probes (~10-50 keys a
# decision); the upkeep it saves, ~2 dict operations per page stored or evicted (~10^3 pages a
# request). Past this many nodes the table keeps every node's entries.
DIRECT_MAX_NODES = 16


def longest_prefix(key_to_nodes: Mapping[int, int], keys: np.ndarray, num_nodes: int) -> np.ndarray:
    """int64 [num_nodes]: pages of `keys`, from the first, that each node holds without a gap.

    Both tables are prefix-closed per node (a cache indexes a page only below its indexed parent
    and evicts children before parents; the approximate tree trims leaves first), so the holders
    of page d shrink as d grows and only the depths where they change need finding: a bisection,
    O(changes x log pages) lookups instead of one per matched page. `longest_prefix_linear` is the
    page-by-page walk it must agree with (tests/sim/test_routing_table.py).
    """
    return bisect_holders(key_to_nodes.get, keys, num_nodes)


def bisect_holders(get: Callable[[int, int], int], keys: np.ndarray, num_nodes: int) -> np.ndarray:
    """`longest_prefix` with the holders of a key given by get(key, 0)."""
    matched = np.zeros(num_nodes, dtype=np.int64)
    num_keys = keys.shape[0]
    item = keys.item
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
    key_to_nodes: Mapping[int, int], keys: np.ndarray, num_nodes: int
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
        self.entries = HolderTable(num_nodes)  # page key -> bitmask of the (kept) nodes caching it
        # One int object per node's bit: a key only one node holds shares it (at hundreds of
        # nodes a bitmask is a ~60-byte int; millions of keys would each hold a copy).
        self._bits = [1 << node for node in range(num_nodes)]
        self._direct: dict[int, TwoLevelIndex] = {}  # node -> its index, read instead

    def watch(self, node: int, index) -> None:
        """`node`'s cache indexes into `index` (before any event of it): read it directly where
        that gives the same answers (see the module docstring)."""
        if (
            self.num_nodes <= DIRECT_MAX_NODES
            and isinstance(index, TwoLevelIndex)
            and not index.overflow_used
            and not len(index)
        ):
            self._direct[node] = index

    def _keep(self, node: int) -> None:
        """Keep `node`'s entries from now on: its level 1 is what its events had left."""
        index = self._direct.pop(node)
        self.entries.add(list(index.key_to_page), node)

    @property
    def key_to_nodes(self) -> Mapping[int, int]:
        """Page key -> bitmask of the nodes caching it (kept entries and read indexes)."""
        if not self._direct:
            return self.entries
        return _Holders(
            self.entries, {self._bits[n]: i.key_to_page for n, i in self._direct.items()}
        )

    def on_cache_event(self, event: str, keys: list[int], node: int) -> None:
        """A node stored (indexed) or removed (evicted) these pages."""
        direct = self._direct.get(node)
        if direct is not None:
            if not direct.overflow_used:
                return  # its index answers for it
            self._keep(node)  # (this event's pages are in its level 1 already)
        if event == "stored":
            self.entries.add(keys, node)
        else:
            self.entries.remove(keys, node)

    def nodes_holding(self, key: int) -> list[int]:
        holders = self.key_to_nodes.get(key, 0)
        return [n for n in range(self.num_nodes) if holders >> n & 1]

    def matched_pages(self, keys: np.ndarray) -> np.ndarray:
        for node in [n for n, index in self._direct.items() if index.overflow_used]:
            self._keep(node)
        if not self._direct:
            return longest_prefix(self.entries, keys, self.num_nodes)
        # the same bisection, each probed key's holders read from the entries and the slots
        entries = self.entries.get
        direct = [(self._bits[n], index.key_to_page) for n, index in self._direct.items()]

        def holders(key: int, default: int) -> int:
            found = entries(key, default)
            for bit, slots in direct:
                if key in slots:
                    found |= bit
            return found

        return bisect_holders(holders, keys, self.num_nodes)


class _Holders(Mapping[int, int]):
    """Kept entries and directly read indexes as one key -> bitmask mapping (tests, reports)."""

    def __init__(self, entries: Mapping[int, int], direct: dict[int, Mapping[int, int]]):
        self._entries, self._direct = entries, direct  # direct: node bit -> its level 1

    def __getitem__(self, key: int) -> int:
        holders = self._entries.get(key, 0)
        for bit, slots in self._direct.items():
            if key in slots:
                holders |= bit
        if not holders:
            raise KeyError(key)
        return holders

    def __iter__(self) -> Iterator[int]:
        seen = dict.fromkeys(self._entries)
        for slots in self._direct.values():
            seen.update(dict.fromkeys(slots))
        return iter(seen)

    def __len__(self) -> int:
        return sum(1 for _ in self)


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
