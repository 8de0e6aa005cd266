"""What a node's scheduler asks of KV memory, for both mechanisms.

`admit` places a waiting request (contiguous: reserve its maximum length; paged: reference the
cached prefix), `grow` makes room for more tokens (paged: new pages on a "page fault"), `free`
gives everything back, `on_computed` offers finished prompt pages to the prefix index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.kv.contiguous import ContiguousAllocator
from sim.kv.index_base import BLOCK_TABLE_ENTRY_BYTES
from sim.kv.paged_cache import PagedKVCache
from sim.kv.protected_zone import ProtectedZone
from sim.kv.rebuild_cost import break_even_tokens
from sim.sequence import Sequence

if TYPE_CHECKING:
    from sim.config import ExperimentConfig
    from sim.latency import LatencyModel
    from sim.policy_api import MakePolicy


@dataclass(slots=True)
class KVUsage:
    capacity_bytes: int
    allocated_bytes: int  # held for running requests (pages in use, or reserved regions)
    live_bytes: int  # bytes that hold real tokens of running requests
    cached_bytes: int  # unreferenced pages kept for reuse (evictable)
    retired_bytes: int  # released pages waiting for the epoch to end
    fragmentation_bytes: (
        int  # contiguous: free bytes outside the largest hole; paged: unused slots of last pages
    )
    pool_bytes: (
        int  # memory the allocator holds (contiguous: grown segments; paged: the whole pool)
    )
    internal_frag_bytes: int = (
        0  # allocated but unused: paged, slots of last pages; contiguous, reserved tail
    )
    index_bytes: int = (
        0  # paged: modelled prefix-index entries + block tables (sim/kv/index_base.py)
    )


class PagedKV:
    def __init__(self, cache: PagedKVCache, token_bytes: int):
        self.cache = cache
        self.token_bytes = token_bytes
        self.page_size = cache.page_size
        self.live_tokens = (
            0  # sum of num_computed over admitted requests (shared pages counted per request)
        )
        self.slot_tokens = 0  # sum of len(pages) x page_size over admitted requests
        self.held_tokens = (
            0  # sum of kv_tokens: slots holding a token or written by the step in flight
        )

    def admit(self, seq: Sequence, now: float) -> bool:
        """Place a waiting request on its cached prefix (references only; see `commit`)."""
        match = self.cache.match_prefix(seq.keys, seq.req.prompt, now, record=False)
        seq.pending_match = match
        seq.pages = list(match.pages)
        seq.num_computed = len(match.pages) * self.page_size
        seq.kv_tokens = seq.num_computed
        seq.stored_pages = len(match.pages)
        self.live_tokens += seq.num_computed
        self.slot_tokens += seq.num_computed
        self.held_tokens += seq.num_computed
        return True

    def commit(self, seq: Sequence, now: float) -> None:
        """The request is admitted for good: record its hit and decide once whether its new segment
        may be cached. A waiting head that is placed and rolled back step after step (head-of-line
        blocking) must not inflate hit counts, the protected zone's window or its own false hits."""
        match, seq.pending_match = seq.pending_match, None
        first = seq.preemptions == 0
        self.cache.record_hit(match.pages, now, first_admission=first)
        if not first:
            return
        seq.cached_tokens = seq.num_computed
        seq.false_hits += match.false_hits
        seq.wrong_reuse_tokens += match.wrong_reuse_tokens
        new_tokens = seq.prompt_tokens - seq.num_computed
        first_key = (
            int(seq.keys[len(match.pages)]) if len(match.pages) < seq.keys.shape[0] else None
        )
        seq.cacheable = self.cache.admit_segment(new_tokens, bool(match.pages), first_key)

    def grow(self, seq: Sequence, num_tokens: int, now: float) -> bool:
        want = seq.num_computed + num_tokens
        need = -(-want // self.page_size) - len(seq.pages)
        if need > 0:
            before = self.cache.pool.use_after_free
            pages = self.cache.allocate(need, now)
            if pages is None:
                return False
            seq.use_after_free += self.cache.pool.use_after_free - before
            seq.pages.extend(pages)
            self.slot_tokens += need * self.page_size
        if want > seq.kv_tokens:
            self.held_tokens += want - seq.kv_tokens
            seq.kv_tokens = want
        return True

    def on_computed(self, seq: Sequence, num_tokens: int, now: float) -> None:
        self.live_tokens += num_tokens
        seq.last_read_s = now  # the step that just ended read (and wrote) its pages
        full = min(seq.num_computed, seq.prompt_tokens) // self.page_size
        if seq.cacheable and full > seq.stored_pages:
            self.cache.store_pages(seq.pages, seq.keys, seq.req.prompt, seq.stored_pages, full, now)
        seq.stored_pages = max(seq.stored_pages, full)

    def free(self, seq: Sequence) -> None:
        self.live_tokens -= seq.num_computed
        self.slot_tokens -= len(seq.pages) * self.page_size
        self.held_tokens -= seq.kv_tokens
        seq.kv_tokens = 0
        self.cache.release(seq.pages, seq.last_read_s)
        seq.pages = []

    def end_step(self, now: float) -> int:
        """A batch step finished at `now`: a new epoch; retired pages whose readers exited are freed."""
        return self.cache.end_epoch(now)

    def idle_reclaim(self, now: float) -> float | None:
        """Nothing runs: free retired pages no reader holds; seconds until more can go, or None."""
        return self.cache.idle_reclaim(now)

    def free_tokens(self) -> int:
        return self.cache.available_pages() * self.page_size

    def capacity_tokens(self) -> int:
        return self.cache.pool.num_pages * self.page_size

    def usage(self) -> KVUsage:
        pool, pb, tb = self.cache.pool, self.cache.pool.page_bytes, self.token_bytes
        allocated = pool.num_used * pb
        frag = (self.slot_tokens - self.held_tokens) * tb  # unused slots of requests' last pages
        block_tables = self.slot_tokens // self.page_size * BLOCK_TABLE_ENTRY_BYTES
        return KVUsage(
            capacity_bytes=pool.num_pages * pb,
            allocated_bytes=allocated,
            live_bytes=max(
                0, allocated - frag
            ),  # shared pages are full: only last pages have holes
            cached_bytes=pool.num_cached * pb,
            retired_bytes=pool.num_retired * pb,
            fragmentation_bytes=frag,
            pool_bytes=pool.num_pages * pb,
            internal_frag_bytes=frag,
            index_bytes=self.cache.index_overhead_bytes() + block_tables,
        )


class ContiguousKV:
    """No prefix reuse; the whole maximum length is reserved at admission."""

    def __init__(
        self, alloc: ContiguousAllocator, token_bytes: int, max_new_tokens: int, max_model_len: int
    ):
        self.alloc = alloc
        self.token_bytes = token_bytes
        self.max_new_tokens = max_new_tokens
        self.max_model_len = max_model_len
        self.live_tokens = 0
        self.oom_events = 0

    def reservation_tokens(self, seq: Sequence) -> int:
        return min(
            self.max_model_len, seq.prompt_tokens + max(self.max_new_tokens, seq.req.output_tokens)
        )

    def admit(self, seq: Sequence, now: float) -> bool:
        if self.alloc.allocate(seq.req.request_id, self.reservation_tokens(seq) * self.token_bytes):
            return True
        if not seq.oom_blocked:  # count each request that hit the wall once
            seq.oom_blocked = True
            self.oom_events += 1
        return False

    def commit(self, seq: Sequence, now: float) -> None:
        pass

    def grow(self, seq: Sequence, num_tokens: int, now: float) -> bool:
        return seq.num_computed + num_tokens <= self.reservation_tokens(seq)

    def on_computed(self, seq: Sequence, num_tokens: int, now: float) -> None:
        self.live_tokens += num_tokens

    def free(self, seq: Sequence) -> None:
        self.live_tokens -= seq.num_computed
        self.alloc.free(seq.req.request_id)

    def end_step(self, now: float) -> int:
        return 0

    def idle_reclaim(self, now: float) -> float | None:
        return None

    def free_tokens(self) -> int:
        return (self.alloc.capacity_bytes - self.alloc.used_bytes) // self.token_bytes

    def capacity_tokens(self) -> int:
        return self.alloc.capacity_bytes // self.token_bytes

    def usage(self) -> KVUsage:
        a = self.alloc
        return KVUsage(
            capacity_bytes=a.capacity_bytes,
            allocated_bytes=a.used_bytes,
            live_bytes=self.live_tokens * self.token_bytes,
            cached_bytes=0,
            retired_bytes=0,
            fragmentation_bytes=a.fragmentation_bytes(),
            pool_bytes=a.pool_bytes,
            internal_frag_bytes=max(0, a.used_bytes - self.live_tokens * self.token_bytes),
        )


def paged_kv_from_config(
    cfg: ExperimentConfig, latency: LatencyModel, node_id: int, make_policy: MakePolicy
) -> PagedKV:
    """One node's paged KV manager as the config asks (pool, index, policies, zone, reclaim)."""
    c, token_bytes = cfg.cache, cfg.model.kv_bytes_per_token
    page_bytes = c.page_size * token_bytes
    num_pages = cfg.kv_capacity_bytes // page_bytes
    zone = None
    if c.protected_zone:
        zone = ProtectedZone(
            num_pages,
            c.protected_share,
            c.protected_window,
            int(c.protected_max_fraction * num_pages),
        )
    cache = PagedKVCache(
        num_pages,
        c.page_size,
        page_bytes,
        eviction=make_policy("eviction", cfg.policies.eviction),
        admission=make_policy("admission", cfg.policies.admission),
        prefix_cache=c.prefix_cache,
        index=c.index,
        epoch_reclaim=c.reclaim == "epoch",
        race_window_s=c.race_window_s,
        eviction_batch_pages=c.eviction_batch_pages,
        protected=zone,
        break_even_tokens=break_even_tokens(latency, c.page_size),
        node_id=node_id,
    )
    return PagedKV(cache, token_bytes)
