"""The bytes a step moves for requests whose KV pages live on other nodes (sim/placement.py).

A step reads each placed request's whole context and writes the KV it computes: the part held by
peers crosses the network before the step can run. Per peer it sends the page index (the codec's
bytes, cached per request and peer until the step reaches a new page), then the reads and writes;
sim/network.py prices it. Decode steps of placed requests also record their wait against the
bandwidth bound of the same bytes (what a token of a long request pays for its remote pages).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.xnode.network import Flow, Network
from sim.xnode.page_index_codec import encoded_size

if TYPE_CHECKING:
    from sim.sequence import Sequence
    from sim.xnode.placement import Record


class PageTraffic:
    def __init__(self, page_size: int, network: Network, records: dict[Sequence, Record]):
        self.page_size = page_size
        self.network = network
        self.records = records  # the placement's, shared: read only here

    def step_transfer_s(self, owner: int, batch: list, now: float) -> float:
        """Seconds the step waits for its remote pages: read the context, write the new KV."""
        reads: dict[int, list[Flow]] = {}
        writes: dict[int, list[Flow]] = {}
        index: dict[int, int] = {}
        decoding: list[Record] = []
        for seq, n, is_prefill, *_ in batch:
            rec = self.records.get(seq)
            if rec is not None and rec.went_remote:
                self._flows(rec, seq.num_computed, n, reads, writes, index)
                if not is_prefill:
                    decoding.append(rec)
        if not reads and not writes:
            return 0.0
        total = self.network.transfer(owner, _merge(reads), _merge(writes), now, index)
        cost = self.network.last_cost
        assert cost is not None  # transfer() just priced this step
        for rec in decoding:  # what a token of a placed request waits for, against the bound
            rec.decode_steps += 1
            rec.decode_transfer_s += total
            rec.decode_wire_s += cost.wire_s
        return total

    def _flows(self, rec: Record, ctx: int, n: int, reads: dict, writes: dict, index: dict) -> None:
        """Add one request's step: it reads its ctx tokens and writes n new ones (tail pages only)."""
        ps, lead = self.page_size, rec.lead
        nodes, pages = rec.as_arrays()
        pos = lead + np.arange(nodes.shape[0])  # logical page of each tail entry
        read_end = int(np.clip(-(-ctx // ps) - lead, 0, nodes.shape[0]))
        w0, w1 = (
            max(0, ctx // ps - lead),
            int(np.clip(-(-(ctx + n) // ps) - lead, 0, nodes.shape[0])),
        )
        read_tok = np.minimum(ps, ctx - pos[:read_end] * ps)
        write_tok = np.minimum((pos[w0:w1] + 1) * ps, ctx + n) - np.maximum(pos[w0:w1] * ps, ctx)
        for peer in rec.peers:
            sel = nodes[:read_end] == peer
            if sel.any():
                reads.setdefault(peer, []).append((pages[:read_end][sel], int(read_tok[sel].sum())))
            sel = nodes[w0:w1] == peer
            if sel.any():
                writes.setdefault(peer, []).append((pages[w0:w1][sel], int(write_tok[sel].sum())))
            index[peer] = index.get(peer, 0) + self._index_bytes(rec, peer, max(read_end, w1))

    def _index_bytes(self, rec: Record, peer: int, m: int) -> int:
        """Encoded index of the request's pages on `peer` among its first m tail pages (cached:
        it changes only when the step reaches a new page)."""
        cached = rec.index_cache.get(peer)
        if cached is None or cached[0] != m:
            nodes, pages = rec.as_arrays()
            cached = (m, encoded_size({peer: pages[:m][nodes[:m] == peer]}))
            rec.index_cache[peer] = cached
        return cached[1]

    def summary(self, duration_s: float) -> dict:
        t = self.network.totals
        util = self.network.utilization(duration_s)
        return {
            "network_bytes": t.read_bytes + t.write_bytes,
            "network_read_bytes": t.read_bytes,
            "network_write_bytes": t.write_bytes,
            "network_messages": t.messages,
            "network_index_bytes": t.index_bytes,
            "network_transfers": t.num_transfers,
            "network_transfer_s": t.transfer_s,
            "network_wire_s": t.wire_s,
            "network_message_s": t.message_s,
            "network_byte_s": t.byte_s,
            "network_handshake_s": t.handshake_s,
            "network_wait_s": t.wait_s,
            "link_utilization_mean": float(util.mean()),
            "link_utilization_max": float(util.max()),
        }


def _merge(flows: dict[int, list[Flow]]) -> dict[int, Flow]:
    return {
        p: (np.concatenate([f[0] for f in fs]), sum(f[1] for f in fs))
        for p, fs in sorted(flows.items())
    }
