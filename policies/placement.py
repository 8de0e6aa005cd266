"""Placement strategies: which node holds each KV page of a request allowed to leave its node.

The mechanism (sim/xnode/placement.py) measures room, allocates, moves and frees pages; a
strategy only says where it would like each page to go.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from policies.params import NoParams
from sim.policy_api import PlacementStrategy

__all__ = ["PlacementStrategy"]


class Spill:
    """Pages stay on the request's node while it has room; the overflow goes to the peer with
    the most room, then the next one."""

    Params = NoParams
    keep_local_when_it_fits = True

    def __init__(self, params: NoParams):
        pass

    def members(self, owner: int, peers_by_room: list[int]) -> tuple[int, ...]:
        return ()

    def preferred_nodes(self, owner, members, first, need, room, peers_by_room) -> list[int]:
        prefer = [owner] * min(need, room[owner])
        for peer in peers_by_room:
            prefer += [peer] * min(need - len(prefer), room[peer])
        return prefer

    def busiest_node_pages(self, pages: int, num_nodes: int) -> int:
        return -(-pages // num_nodes)  # spread over every node


class ShardParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    shard_nodes: int = Field(default=2, gt=0)  # stripe over this many nodes (owner included)
    stripe_pages: int = Field(default=64, gt=0)  # consecutive pages per node per stripe


class Shard:
    """A long context is striped over k nodes: stripes of `stripe_pages` consecutive pages
    rotate over the owner and the k-1 peers with the most room."""

    Params = ShardParams
    keep_local_when_it_fits = False

    def __init__(self, params: ShardParams):
        self.k, self.stripe = params.shard_nodes, params.stripe_pages

    def members(self, owner: int, peers_by_room: list[int]) -> tuple[int, ...]:
        return (owner, *peers_by_room[: self.k - 1])

    def preferred_nodes(self, owner, members, first, need, room, peers_by_room) -> list[int]:
        k = len(members)
        return [members[(j // self.stripe) % k] for j in range(first, first + need)]

    def busiest_node_pages(self, pages: int, num_nodes: int) -> int:
        full, rest = divmod(pages, self.stripe)  # stripe i goes to member i mod k
        per_member = [0] * self.k
        for i in range(full):
            per_member[i % self.k] += self.stripe
        per_member[full % self.k] += rest
        return max(per_member)
