"""What a node's scheduler asks of KV memory, for both mechanisms.

`admit` places a waiting request (contiguous: reserve its maximum length; paged: reference the
cached prefix), `grow` makes room for more tokens (paged: new pages on a "page fault"), `free`
gives everything back, `on_computed` offers finished prompt pages to the prefix index.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.kv.contiguous import ContiguousAllocator
from sim.kv.paged_cache import PagedKVCache
from sim.sequence import Sequence


@dataclass(slots=True)
class KVUsage:
    capacity_bytes: int
    allocated_bytes: int  # held for running requests (pages in use, or reserved regions)
    live_bytes: int  # bytes that hold real tokens of running requests
    cached_bytes: int  # unreferenced pages kept for reuse (evictable)
    retired_bytes: int  # released pages waiting for the epoch to end
    fragmentation_bytes: int  # contiguous: free bytes outside the largest hole; paged: unused slots of last pages
    pool_bytes: int  # memory the allocator holds (contiguous: grown segments; paged: the whole pool)


class PagedKV:
    def __init__(self, cache: PagedKVCache, token_bytes: int):
        self.cache = cache
        self.token_bytes = token_bytes
        self.page_size = cache.page_size
        self.live_tokens = 0

    def admit(self, seq: Sequence, now: float) -> bool:
        match = self.cache.match_prefix(seq.keys, seq.req.prompt, now)
        seq.pages = list(match.pages)
        seq.num_computed = len(match.pages) * self.page_size
        seq.stored_pages = len(match.pages)
        if seq.preemptions == 0:
            seq.cached_tokens = seq.num_computed
            seq.false_hits += match.false_hits
            seq.wrong_reuse_tokens += match.wrong_reuse_tokens
        new_tokens = seq.prompt_tokens - seq.num_computed
        seq.cacheable = self.cache.admit_segment(new_tokens, already_shared=bool(match.pages))
        self.live_tokens += seq.num_computed
        return True

    def grow(self, seq: Sequence, num_tokens: int, now: float) -> bool:
        need = -(-(seq.num_computed + num_tokens) // self.page_size) - len(seq.pages)
        if need > 0:
            pages = self.cache.allocate(need, now)
            if pages is None:
                return False
            seq.pages.extend(pages)
        return True

    def on_computed(self, seq: Sequence, num_tokens: int, now: float) -> None:
        self.live_tokens += num_tokens
        full = min(seq.num_computed, seq.prompt_tokens) // self.page_size
        if seq.cacheable and full > seq.stored_pages:
            self.cache.store_pages(seq.pages, seq.keys, seq.req.prompt, seq.stored_pages, full, now)
        seq.stored_pages = max(seq.stored_pages, full)

    def free(self, seq: Sequence) -> None:
        self.live_tokens -= seq.num_computed
        self.cache.release(seq.pages)
        seq.pages = []

    def end_step(self) -> int:
        """The batch step finished: retired pages return to the free list; how many."""
        return self.cache.end_epoch()

    def free_tokens(self) -> int:
        return self.cache.available_pages() * self.page_size

    def capacity_tokens(self) -> int:
        return self.cache.pool.num_pages * self.page_size

    def usage(self) -> KVUsage:
        pool, pb = self.cache.pool, self.cache.pool.page_bytes
        allocated = pool.num_used * pb
        return KVUsage(
            capacity_bytes=pool.num_pages * pb, allocated_bytes=allocated,
            live_bytes=min(allocated, self.live_tokens * self.token_bytes),
            cached_bytes=pool.num_cached * pb, retired_bytes=pool.num_retired * pb,
            fragmentation_bytes=max(0, allocated - self.live_tokens * self.token_bytes),
            pool_bytes=pool.num_pages * pb,
        )


class ContiguousKV:
    """No prefix reuse; the whole maximum length is reserved at admission."""

    def __init__(self, alloc: ContiguousAllocator, token_bytes: int, max_new_tokens: int, max_model_len: int):
        self.alloc = alloc
        self.token_bytes = token_bytes
        self.max_new_tokens = max_new_tokens
        self.max_model_len = max_model_len
        self.live_tokens = 0
        self.oom_events = 0

    def reservation_tokens(self, seq: Sequence) -> int:
        return min(self.max_model_len, seq.prompt_tokens + max(self.max_new_tokens, seq.req.output_tokens))

    def admit(self, seq: Sequence, now: float) -> bool:
        if self.alloc.allocate(seq.req.request_id, self.reservation_tokens(seq) * self.token_bytes):
            return True
        if not seq.oom_blocked:  # count each request that hit the wall once
            seq.oom_blocked = True
            self.oom_events += 1
        return False

    def grow(self, seq: Sequence, num_tokens: int, now: float) -> bool:
        return seq.num_computed + num_tokens <= self.reservation_tokens(seq)

    def on_computed(self, seq: Sequence, num_tokens: int, now: float) -> None:
        self.live_tokens += num_tokens

    def free(self, seq: Sequence) -> None:
        self.live_tokens -= seq.num_computed
        self.alloc.free(seq.req.request_id)

    def end_step(self) -> int:
        return 0

    def free_tokens(self) -> int:
        return (self.alloc.capacity_bytes - self.alloc.used_bytes) // self.token_bytes

    def capacity_tokens(self) -> int:
        return self.alloc.capacity_bytes // self.token_bytes

    def usage(self) -> KVUsage:
        a = self.alloc
        return KVUsage(
            capacity_bytes=a.capacity_bytes, allocated_bytes=a.used_bytes,
            live_bytes=self.live_tokens * self.token_bytes, cached_bytes=0, retired_bytes=0,
            fragmentation_bytes=a.fragmentation_bytes(), pool_bytes=a.pool_bytes,
        )
