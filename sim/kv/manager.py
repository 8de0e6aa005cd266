"""What a node's scheduler asks of KV memory, for both mechanisms.

`admit` places a waiting request (contiguous: reserve its maximum length; paged: reference the
cached prefix), `grow` makes room for more tokens (paged: new pages on a "page fault"), `free`
gives everything back, `on_computed` offers finished prompt pages to the prefix index.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING

import numpy as np

from sim.kv.contiguous import ContiguousAllocator
from sim.kv.index_base import BLOCK_TABLE_ENTRY_BYTES, Match
from sim.kv.paged_cache import PagedKVCache
from sim.kv.protected_zone import ProtectedZone
from sim.kv.protocol import CacheCounters
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
    def __init__(
        self,
        cache: PagedKVCache,
        token_bytes: int,
        zone_cap_tokens: int = 0,
        cache_outputs: bool = False,
        hash_bits: int = 64,
    ):
        self.cache = cache
        self.cache_outputs = cache_outputs  # index generated tokens' pages too
        self.hash_bits = hash_bits  # page keys of generated tokens, as the prompt's
        self.zone_cap_tokens = (
            zone_cap_tokens  # the protected zone may pin this many, never evicted
        )
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
        if self.cache.prefix_cache:
            keys, tokens = seq.keys, seq.req.prompt
            if self.cache_outputs and seq.recomputed_outputs:  # may hit its own outputs
                tokens, keys = seq.context_pages(self.page_size, self.hash_bits)
                tokens = tokens[: seq.prefill_target]
            match = self.cache.match_prefix(keys, tokens, now, record=False)
        else:  # no reuse: nothing to match (and the prompt's keys are not needed)
            match = Match(pages=[])
        seq.pending_match = match
        seq.pages = list(match.pages)
        seq.num_computed = len(match.pages) * self.page_size
        seq.kv_tokens = seq.num_computed
        seq.stored_pages = len(match.pages)
        self.live_tokens += seq.num_computed
        self.slot_tokens += seq.num_computed
        self.held_tokens += seq.num_computed
        return True

    def oom_action(self, seq: Sequence) -> str:
        """Admission only references cached pages: it never fails for room (growing may)."""
        return "wait"

    def reset(self) -> None:
        """Never called: only a failed admission crashes a node, and paged admission never fails."""
        raise NotImplementedError("a crash restart is modelled for the contiguous manager only")

    def commit(self, seq: Sequence, now: float) -> None:
        """The request is admitted for good: record its hit and decide once whether its new segment
        may be cached. A waiting head that is placed and rolled back step after step (head-of-line
        blocking) must not inflate hit counts, the protected zone's window or its own false hits."""
        match, seq.pending_match = seq.pending_match, None
        assert match is not None  # admit() left it
        first = seq.preemptions == 0
        self.cache.record_hit(match.pages, now, first_admission=first)
        if not first:
            return
        seq.cached_tokens = seq.num_computed
        seq.false_hits += match.false_hits
        seq.wrong_reuse_tokens += match.wrong_reuse_tokens
        new_tokens = seq.prompt_tokens - seq.num_computed
        first_key = None  # the admission policy's ghost list (not consulted without reuse)
        if self.cache.prefix_cache and len(match.pages) < seq.keys.shape[0]:
            first_key = int(seq.keys[len(match.pages)])
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

    def room_for_next_decode(self, seqs: list[Sequence]) -> bool:
        """Each of these decoding requests computes one token now and grows by one more next
        step: will the free list cover every new page, so no grow reclaims, evicts or fails?"""
        size = self.page_size
        need = 0
        for seq in seqs:
            if seq.num_computed + 2 > len(seq.pages) * size:
                need += 1
        return need <= self.cache.pool.num_free

    def repeat_decode(self, seqs: list[Sequence], now: float) -> None:
        """Scheduler.repeat_decode's work, inlined: `end_step(now)`; per request (in order) one
        more computed token, `on_computed(1)` and one more generated token; then per request
        `grow(1)` (room_for_next_decode said every grow succeeds). The same operations in the
        same order; a page boundary takes the general `grow`, a page to index `store_pages`."""
        self.cache.end_epoch(now)
        size, cache_outputs = self.page_size, self.cache_outputs
        for seq in seqs:
            computed = seq.num_computed + 1
            seq.num_computed = computed
            seq.last_read_s = now
            full = (computed if cache_outputs else min(computed, seq.prompt_tokens)) // size
            if full > seq.stored_pages:
                if seq.cacheable:
                    keys, tokens = self._keys_and_tokens(seq, full)
                    self.cache.store_pages(seq.pages, keys, tokens, seq.stored_pages, full, now)
                seq.stored_pages = full
            seq.num_generated += 1
        self.live_tokens += len(seqs)
        held = 0
        for seq in seqs:
            want = seq.num_computed + 1
            if want > len(seq.pages) * size:
                if not self.grow(seq, 1, now):
                    raise AssertionError("room_for_next_decode promised room")
            elif want > seq.kv_tokens:
                held += want - seq.kv_tokens
                seq.kv_tokens = want
        self.held_tokens += held

    def span_tokens(self, seqs: list[Sequence], pairs: int, ahead: list[int] | None = None) -> int:
        """Slots the next `pairs` (apply, plan again) pairs of a run `decode_span` allowed take
        from the free list (whole new pages; the requests as last applied): what used_tokens()
        grows by once they are applied (advance_decodes), and free_tokens() falls by, less
        `retired_tokens()` (the first pair returns them). `ahead`: as `decode_span`'s, for the
        first pair (not applied yet)."""
        size = self.page_size
        pages = 0
        for seq, extra in zip(seqs, ahead or repeat(0), strict=False):  # (zeros: no ahead)
            new = -(-(seq.num_computed + extra + 1 + pairs) // size) - len(seq.pages)
            if new > 0:
                pages += new
        return pages * size

    def span_store_keys(
        self, seqs: list[Sequence], pairs: int, ahead: list[int] | None = None
    ) -> set[int]:
        """Page keys the next `pairs` (apply, plan again) pairs of a run `decode_span` allowed
        index (the requests as last applied): the only routing-table entries they touch.
        `ahead`: as `decode_span`'s, for the first pair (not applied yet)."""
        if not self.cache.prefix_cache:
            return set()
        size, keys = self.page_size, set()
        for seq, extra in zip(seqs, ahead or repeat(0), strict=False):  # (zeros: no ahead)
            c = seq.num_computed + extra + pairs
            full = (c if self.cache_outputs else min(c, seq.prompt_tokens)) // size
            if seq.cacheable and full > seq.stored_pages:
                page_keys = self._keys_and_tokens(seq, full)[0]
                keys.update(page_keys[seq.stored_pages : full].tolist())
        return keys

    def decode_span(
        self,
        seqs: list[Sequence],
        limit: int,
        first_end_s: float,
        ahead: list[int] | None = None,
    ) -> int:
        """How many of the next `limit` (apply, plan again) pairs of this decode batch, starting
        with the step in flight (ending at `first_end_s`), take their new pages from the free
        list with nothing retired to reclaim after the first pair (0 when the first already
        does more): pages retired before it all return to the free list at its end, after the
        pages the pairs take (they do not count). Pages they fill may be indexed: nothing
        but the node's own steps reads or changes its index while they run (the node applies
        them before anything else does), so `advance_decodes` indexes them later, in order.
        `ahead`: tokens each request's step in flight computes beyond a decode's one (a prompt's
        last chunk: its pages are taken already, Scheduler.prefill_span)."""
        pool = self.cache.pool
        if limit <= 0 or not pool.returns_all_at(first_end_s):
            return 0
        size, n = self.page_size, limit
        free = pool.num_free
        if ahead is not None:
            tables = [
                (seq.num_computed + 1 + extra, len(seq.pages) * size)
                for seq, extra in zip(seqs, ahead, strict=True)
            ]
            return self._pairs_that_fit(tables, n, free)
        new_slots = 0  # pages_for(n), without building the tables (the usual answer: all fit)
        for seq in seqs:
            short = -(-(seq.num_computed + 1 + n) // size) * size - len(seq.pages) * size
            if short > 0:
                new_slots += short
        if new_slots <= free * size:
            return n
        tables = [(seq.num_computed + 1, len(seq.pages) * size) for seq in seqs]
        return self._pairs_that_fit(tables, n, free)

    def _pairs_that_fit(self, tables: list[tuple[int, int]], n: int, free: int) -> int:
        """The most pairs, up to n, whose new pages the free list covers: `tables` holds each
        request's tokens after the first pair and its slots now."""
        size = self.page_size

        def pages_for(m: int) -> int:  # new pages m pairs take (each plans one more token)
            return sum(max(0, -(-(want + m) // size) * size - slots) for want, slots in tables)

        if pages_for(n) <= free * size:
            return n
        low, high = 0, n  # pages_for(low) fits, pages_for(high) does not
        while high - low > 1:
            mid = (low + high) // 2
            if pages_for(mid) <= free * size:
                low = mid
            else:
                high = mid
        return low

    def advance_decodes(self, seqs: list[Sequence], ends: list[float]) -> None:
        """For a run `decode_span` allowed, at each of these times in order: `end_step`, each
        request's `on_computed(1)`, then each one's `grow(1)`; the same end state in one pass,
        each request's computed and generated tokens counted (Scheduler.repeat_decodes' whole
        work on the requests). The pool and the prefix
        index share no state, so the pages taken and the pages indexed are each replayed in
        their own order (step by step, batch order within a step), at their own step's end."""
        d, size, batch = len(ends), self.page_size, len(seqs)
        pool = self.cache.pool
        if pool.num_retired:  # the span's first end returns them (decode_span), after the pages
            pool.end_epoch(ends[0])  # it takes: the free list's tail
            pool.end_epochs(ends[1:])
        else:
            pool.end_epochs(ends)
        self.live_tokens += d * batch
        last = ends[-1]
        allocs: list[int] = []  # pair * batch + batch position of each new page (sorts as both)
        stores: list[tuple[int, int, int]] = []  # (pair, batch position, full pages after it)
        index, outputs = self.cache.prefix_cache, self.cache_outputs
        stride, held = size * batch, 0
        for b, seq in enumerate(seqs):
            c = seq.num_computed
            computed = seq.num_computed = c + d
            seq.num_generated += d
            seq.last_read_s = last
            full = (computed if outputs else min(computed, seq.prompt_tokens)) // size
            if full > seq.stored_pages:
                if index and seq.cacheable:
                    stores.extend(self._stores_of(b, c, seq.stored_pages, full))
                else:
                    seq.stored_pages = full
            want = computed + 1
            # page q is first needed by pair q * size - c - 1
            first = (len(seq.pages) * size - c - 1) * batch + b
            allocs.extend(range(first, (-(-want // size) * size - c - 1) * batch, stride))
            if want > seq.kv_tokens:
                held += want - seq.kv_tokens
                seq.kv_tokens = want
        self.held_tokens += held
        if allocs:
            allocs.sort()
            if ends[allocs[0] // batch] >= pool.read_until_max:  # no old reader runs: no test
                appends = [seq.pages.append for seq in seqs]
                for key, page in zip(allocs, pool.take(len(allocs)), strict=True):
                    appends[key % batch](page)
            else:
                pages, unsafe = pool.allocate_at([ends[key // batch] for key in allocs])
                for key, page, bad in zip(allocs, pages, unsafe, strict=True):
                    seq = seqs[key % batch]
                    seq.pages.append(page)
                    seq.use_after_free += bad
            self.slot_tokens += len(allocs) * size
        if stores:
            stores.sort()
            store = self.cache.store_pages
            for m, b, full in stores:
                seq = seqs[b]
                keys, tokens = self._keys_and_tokens(seq, full)
                store(seq.pages, keys, tokens, seq.stored_pages, full, ends[m])
                seq.stored_pages = full

    def _stores_of(
        self, b: int, computed: int, stored: int, full: int
    ) -> list[tuple[int, int, int]]:
        """(pair, b, full pages) of each `store_pages` a request at batch position b makes
        while its computed tokens grow from `computed`, one per pair, until `full` pages are
        full: pages up to the first pair's count at once, then one per page boundary."""
        size = self.page_size
        first = (computed + 1) // size  # full after pair 0 (the prompt caps it: <= full)
        if not self.cache_outputs:
            first = min(first, full)
        out = [(0, b, first)] if first > stored else []
        out.extend((f * size - computed - 1, b, f) for f in range(max(first, stored) + 1, full + 1))
        return out

    def add_computed(self, seq: Sequence, num_tokens: int) -> None:
        """Count `num_tokens` more computed tokens of `seq`, nothing else: a decode span whose
        first step completed the prompt applies that step so, its last token as a decode's
        (Scheduler.repeat_decodes; `advance_decodes` reads the time and indexes the pages)."""
        seq.num_computed += num_tokens
        self.live_tokens += num_tokens

    def on_computed(
        self, seq: Sequence, num_tokens: int, now: float, indexable_tokens: int | None = None
    ) -> None:
        """`indexable_tokens`: computed tokens the prefix index may see (default all of them;
        placement passes only the leading local run of pages)."""
        self.live_tokens += num_tokens
        seq.last_read_s = now  # the step that just ended read (and wrote) its pages
        computed = seq.num_computed if indexable_tokens is None else indexable_tokens
        # The prompt's full pages; with cache_outputs the generated tokens' too (vLLM v1 and SGLang
        # index every full page a request has computed).
        limit = computed if self.cache_outputs else min(computed, seq.prompt_tokens)
        full = limit // self.page_size
        if seq.cacheable and full > seq.stored_pages:
            keys, tokens = self._keys_and_tokens(seq, full)
            self.cache.store_pages(seq.pages, keys, tokens, seq.stored_pages, full, now)
        seq.stored_pages = max(seq.stored_pages, full)

    def _keys_and_tokens(self, seq: Sequence, num_pages: int) -> tuple[np.ndarray, np.ndarray]:
        """Page keys and token ids covering `num_pages` pages: the prompt's while they suffice,
        else prompt + generated ids (built once per request)."""
        if num_pages <= seq.keys.shape[0]:
            return seq.keys, seq.req.prompt
        tokens, keys = seq.context_pages(self.page_size, self.hash_bits)
        return keys, tokens

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

    def used_tokens(self) -> int:
        return self.cache.pool.num_used * self.page_size

    def counters(self) -> CacheCounters:
        c = self.cache
        return CacheCounters(
            protected_pages=int(c.protected_pages().size),
            evicted_pages=c.num_evicted_pages,
            use_after_free=c.pool.use_after_free,
            admission_rejected_tokens=c.admission_rejected_tokens,
            peak_retired_bytes=c.pool.peak_retired * c.pool.page_bytes,
            evicted_by_depth=c.evicted_by_depth,
        )

    def can_ever_fit(self, seq: Sequence, headroom_tokens: int) -> bool:
        usable = self.capacity_tokens() - headroom_tokens - self.zone_cap_tokens
        total = seq.prompt_tokens + seq.req.output_tokens
        return -(-total // self.page_size) * self.page_size <= usable

    def usage(self) -> KVUsage:
        pool = self.cache.pool
        return self._usage(pool.num_used, self.slot_tokens, self.held_tokens, pool.num_retired)

    def usage_ahead(
        self, seqs: list[Sequence], pairs: int, ahead: list[int] | None = None
    ) -> KVUsage | None:
        """`usage()` once the next `pairs` (apply, plan again) pairs of a run `decode_span`
        allowed are applied (`advance_decodes`), without applying them: their new pages and
        held tokens only. None when applying them may do more that a reader sees (index pages;
        count a use-after-free, which a race window allows): then apply them. `ahead`: as
        `decode_span`'s, for the first pair (not applied yet)."""
        if self.cache.prefix_cache or self.cache.pool.race_window_s:
            return None
        size = self.page_size
        pages = held = 0
        # as advance_decodes grows each one (zeros after them: no step 1 prompts)
        for seq, extra in zip(seqs, ahead or repeat(0), strict=False):
            want = seq.num_computed + extra + pairs + 1
            new = -(-want // size) - len(seq.pages)
            if new > 0:
                pages += new
            if want > seq.kv_tokens:
                held += want - seq.kv_tokens
        used = self.cache.pool.num_used + pages
        # nothing retired once a pair is applied (decode_span)
        return self._usage(used, self.slot_tokens + pages * size, self.held_tokens + held, 0)

    def retired_tokens(self) -> int:
        """Slots of the retired pages (held until their readers exit)."""
        return self.cache.pool.num_retired * self.page_size

    def _usage(
        self, num_used: int, slot_tokens: int, held_tokens: int, num_retired: int
    ) -> KVUsage:
        pool, pb, tb = self.cache.pool, self.cache.pool.page_bytes, self.token_bytes
        allocated = num_used * pb
        frag = (slot_tokens - held_tokens) * tb  # unused slots of requests' last pages
        block_tables = slot_tokens // self.page_size * BLOCK_TABLE_ENTRY_BYTES
        return KVUsage(
            capacity_bytes=pool.num_pages * pb,
            allocated_bytes=allocated,
            live_bytes=max(
                0, allocated - frag
            ),  # shared pages are full: only last pages have holes
            cached_bytes=pool.num_cached * pb,
            retired_bytes=num_retired * pb,
            fragmentation_bytes=frag,
            pool_bytes=pool.num_pages * pb,
            internal_frag_bytes=frag,
            index_bytes=self.cache.index_overhead_bytes() + block_tables,
        )


class ContiguousKV:
    """No prefix reuse; the whole maximum length is reserved at admission.

    reservation: `prompt_plus_max_new_tokens` reserves prompt + max(max_new_tokens, the request's
    output), capped at max_model_len (a client's bound); `max_model_len` reserves the whole
    context window for every request (what frameworks without a per-request bound do).
    on_oom, when no hole fits at the physical limit: `wait` (the request stalls at the head of
    the queue until memory frees: an alloc stall), `reject` (it fails at once), `crash` (the
    serving process dies: the scheduler and the node actor handle it; see sim/node.py).
    """

    def __init__(
        self,
        alloc: ContiguousAllocator,
        token_bytes: int,
        max_new_tokens: int,
        max_model_len: int,
        reservation: str = "prompt_plus_max_new_tokens",
        on_oom: str = "wait",
    ):
        self.alloc = alloc
        self.token_bytes = token_bytes
        self.max_new_tokens = max_new_tokens
        self.max_model_len = max_model_len
        self.reservation = reservation
        self.on_oom = on_oom
        self.live_tokens = 0
        self.oom_events = 0  # alloc stalls: requests that waited for a hole (each counted once)

    def reservation_tokens(self, seq: Sequence) -> int:
        if self.reservation == "max_model_len":
            return self.max_model_len
        return min(
            self.max_model_len, seq.prompt_tokens + max(self.max_new_tokens, seq.req.output_tokens)
        )

    def admit(self, seq: Sequence, now: float) -> bool:
        if self.alloc.allocate(seq.req.request_id, self.reservation_tokens(seq) * self.token_bytes):
            return True
        if self.oom_action(seq) == "wait" and not seq.oom_blocked:  # each stalled request once
            seq.oom_blocked = True
            self.oom_events += 1
        return False

    def commit(self, seq: Sequence, now: float) -> None:
        pass

    def oom_action(self, seq: Sequence) -> str:
        """What a failed admission of `seq` does. Short of free bytes, a framework waits (its byte
        count says the pool is full); with enough free bytes but no hole that large (fragmentation:
        the allocator's own failure, the article's OOM), it does what cache.on_oom says."""
        free = self.alloc.capacity_bytes - self.alloc.used_bytes
        return self.on_oom if free >= self.reservation_tokens(seq) * self.token_bytes else "wait"

    def reset(self) -> None:
        """The serving process restarted: the pool comes back empty (no segment grown)."""
        self.alloc = ContiguousAllocator(self.alloc.capacity_bytes, self.alloc.segment_bytes)
        self.live_tokens = 0

    def grow(self, seq: Sequence, num_tokens: int, now: float) -> bool:
        return seq.num_computed + num_tokens <= self.reservation_tokens(seq)

    def room_for_next_decode(self, seqs: list[Sequence]) -> bool:
        """Each of these decoding requests computes one token now and one more next step: do
        both fit in every reservation?"""
        return all(seq.num_computed + 2 <= self.reservation_tokens(seq) for seq in seqs)

    def span_tokens(self, seqs: list[Sequence], pairs: int, ahead: list[int] | None = None) -> int:
        """Reservations hold a span's tokens already: free and used tokens do not move."""
        return 0

    def retired_tokens(self) -> int:
        """Nothing is retired: a freed reservation is a hole at once."""
        return 0

    def span_store_keys(
        self, seqs: list[Sequence], pairs: int, ahead: list[int] | None = None
    ) -> set[int]:
        """No prefix index: a span indexes nothing."""
        return set()

    def decode_span(
        self,
        seqs: list[Sequence],
        limit: int,
        first_end_s: float,
        ahead: list[int] | None = None,
    ) -> int:
        """How many of the next `limit` (apply, plan again) pairs of this decode batch fit in
        every reservation (see PagedKV.decode_span)."""
        for b, seq in enumerate(seqs):
            computed = seq.num_computed + (ahead[b] if ahead is not None else 0)
            limit = min(limit, self.reservation_tokens(seq) - computed - 1)
        return max(0, limit)

    def add_computed(self, seq: Sequence, num_tokens: int) -> None:
        """Count `num_tokens` more computed tokens of `seq` (see PagedKV.add_computed)."""
        seq.num_computed += num_tokens
        self.live_tokens += num_tokens

    def advance_decodes(self, seqs: list[Sequence], ends: list[float]) -> None:
        """`end_step`, `on_computed(1)` and `grow(1)` for each of these times, each request's
        computed and generated tokens counted (see PagedKV)."""
        d = len(ends)
        for seq in seqs:
            seq.num_computed += d
            seq.num_generated += d
        self.live_tokens += d * len(seqs)

    def repeat_decode(self, seqs: list[Sequence], now: float) -> None:
        """Scheduler.repeat_decode's work: one more token each (reservations hold them)."""
        for seq in seqs:
            seq.num_computed += 1
            seq.num_generated += 1
        self.live_tokens += len(seqs)

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

    def used_tokens(self) -> int:
        return self.alloc.used_bytes // self.token_bytes

    def counters(self) -> CacheCounters:
        return CacheCounters(alloc_stalls=self.oom_events)

    def can_ever_fit(self, seq: Sequence, headroom_tokens: int) -> bool:
        total = seq.prompt_tokens + seq.req.output_tokens
        usable = self.capacity_tokens() - headroom_tokens
        return total <= self.max_model_len and self.reservation_tokens(seq) <= usable

    def usage(self) -> KVUsage:
        return self._usage(self.live_tokens)

    def usage_ahead(
        self, seqs: list[Sequence], pairs: int, ahead: list[int] | None = None
    ) -> KVUsage:
        """`usage()` once the next `pairs` pairs of a span are applied (`advance_decodes`):
        reservations hold their tokens already, only the live tokens grow (`ahead`: by more,
        see PagedKV.decode_span)."""
        return self._usage(self.live_tokens + pairs * len(seqs) + sum(ahead or ()))

    def _usage(self, live_tokens: int) -> KVUsage:
        a = self.alloc
        return KVUsage(
            capacity_bytes=a.capacity_bytes,
            allocated_bytes=a.used_bytes,
            live_bytes=live_tokens * self.token_bytes,
            cached_bytes=0,
            retired_bytes=0,
            fragmentation_bytes=a.fragmentation_bytes(),
            pool_bytes=a.pool_bytes,
            internal_frag_bytes=max(0, a.used_bytes - live_tokens * self.token_bytes),
        )


def contiguous_kv_from_config(cfg: ExperimentConfig) -> ContiguousKV:
    """One node's contiguous baseline manager as the config asks (reservation, on_oom)."""
    c = cfg.cache
    return ContiguousKV(
        ContiguousAllocator(cfg.kv_capacity_bytes, int(c.segment_bytes)),
        cfg.model.kv_bytes_per_token,
        c.max_new_tokens,
        c.max_model_len,
        c.reservation,
        c.on_oom,
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
    zone_cap_tokens = int(c.protected_max_fraction * (num_pages * c.page_size)) if zone else 0
    return PagedKV(cache, token_bytes, zone_cap_tokens, c.cache_outputs, c.hash_bits)
