"""Property tests: random operation sequences on the page pool + prefix index (through PagedKV).

After every operation: pages are conserved (free + used + cached + retired == total), no page is
both free and referenced, every reference count equals the number of running requests holding the
page (so never negative), indexed pages are used or cached, and with level 2 on (two_level, radix)
every reused page holds exactly the request's own tokens. With epoch reclamation no page is ever
handed out while a reader of its previous owner runs.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from policies.admission import Threshold, ThresholdParams
from policies.eviction import FIFO, LFU, LRU, NoParams, Scored, ScoredParams
from sim.kv.hashing import page_keys
from sim.kv.manager import PagedKV
from sim.kv.page_pool import CACHED, FREE, USED
from sim.kv.paged_cache import PagedKVCache
from sim.kv.protected_zone import ProtectedZone
from sim.kv.radix_index import RadixIndex
from sim.sequence import Sequence
from tests.helpers import make_request

PAGE = 4
NUM_PAGES = 12
POLICIES = [
    LRU(NoParams()),
    LFU(NoParams()),
    FIFO(NoParams()),
    Scored(ScoredParams(half_life_s=1.0)),
]

configs = st.fixed_dictionaries(
    {
        "index": st.sampled_from(["two_level", "hash_only", "radix"]),
        "hash_bits": st.sampled_from([2, 64]),  # 2 bits: level 1 collides all the time
        "epoch": st.booleans(),
        "window_s": st.sampled_from([0.0, 0.015]),  # readers outlive a 10 ms step by 15 ms
        "policy": st.integers(0, len(POLICIES) - 1),
        "zone": st.booleans(),
        "min_tokens": st.sampled_from([0, 8]),
    }
)
# A prompt is 1-5 segments of one page (ids 0-3) plus 0-3 extra tokens: prefixes are shared often.
prompts = st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=5), st.integers(0, 3))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("admit"), prompts),
        st.tuples(st.just("step"), st.integers(1, 6)),
        st.tuples(st.just("finish"), st.integers(0, 7)),
        st.tuples(st.just("idle"), st.just(0)),
    ),
    min_size=15,
    max_size=60,
)


def build(cfg: dict) -> PagedKV:
    zone = ProtectedZone(NUM_PAGES, share=0.5, window=4, max_pages=3) if cfg["zone"] else None
    cache = PagedKVCache(
        NUM_PAGES,
        PAGE,
        PAGE * 8,
        eviction=POLICIES[cfg["policy"]],
        admission=Threshold(ThresholdParams(min_tokens=cfg["min_tokens"])),
        index=cfg["index"],
        epoch_reclaim=cfg["epoch"],
        race_window_s=cfg["window_s"],
        eviction_batch_pages=2,
        protected=zone,
    )
    return PagedKV(cache, token_bytes=8)


def tokens_of(segments: list[int], extra: int) -> np.ndarray:
    body = [np.arange(100 * s, 100 * s + PAGE) for s in segments]
    return np.concatenate([*body, np.arange(7000, 7000 + extra)]).astype(np.int32)


def page_tokens(kv: PagedKV, page: int) -> np.ndarray:
    index = kv.cache.index
    if isinstance(index, RadixIndex):
        return np.frombuffer(index.edge_of[page], dtype=np.int32)
    return index.page_tokens.tokens(page)


def check(kv: PagedKV, running: list[Sequence], cfg: dict) -> None:
    pool, index = kv.cache.pool, kv.cache.index
    pool.check_invariants()
    holders = Counter(p for s in running for p in s.pages)
    assert all(len(set(s.pages)) == len(s.pages) for s in running)
    expected = np.zeros(NUM_PAGES, dtype=np.int64)
    for page, n in holders.items():
        expected[page] = n
    assert (pool.ref_count == expected).all()  # hence never negative, and free pages unreferenced
    assert not (pool.state[list(holders)] == FREE).any()
    assert np.isin(pool.state[index.indexed], [USED, CACHED]).all()
    if cfg["epoch"]:
        assert pool.use_after_free == 0


def admit(kv: PagedKV, tokens: np.ndarray, now: float, rid: int, cfg: dict) -> Sequence | None:
    seq = Sequence(
        req=make_request(rid, tokens, output_tokens=1),
        keys=page_keys(tokens, PAGE, cfg["hash_bits"]),
        arrival_s=now,
    )
    kv.admit(seq, now)
    if cfg["index"] != "hash_only":  # level 2 on: what is reused is exactly the request's own
        for k, page in enumerate(seq.pages):
            assert (page_tokens(kv, page) == tokens[k * PAGE : (k + 1) * PAGE]).all()
        assert seq.wrong_reuse_tokens == 0
    if not kv.grow(seq, tokens.size - seq.num_computed, now):
        kv.free(seq)
        return None
    return seq


@settings(max_examples=150, deadline=None)
@given(cfg=configs, operations=ops)
def test_random_operations_keep_the_invariants(cfg, operations):
    kv = build(cfg)
    running: list[Sequence] = []
    now = 0.0
    for rid, (op, arg) in enumerate(operations):
        if op == "admit":
            seq = admit(kv, tokens_of(*arg), now, rid, cfg)
            event(f"false hit: {seq is not None and seq.false_hits > 0}")
            if seq is not None:
                running.append(seq)
        elif op == "step":  # one batch step: prefill everything admitted, decode `arg` tokens
            now += 0.01
            kv.end_step(now)
            for seq in running:
                if kv.grow(seq, arg, now):
                    new = (
                        seq.prompt_tokens - seq.num_computed
                        if seq.num_computed < seq.prompt_tokens
                        else arg
                    )
                    seq.num_computed += new
                    kv.on_computed(seq, new, now)
        elif op == "finish" and running:
            kv.free(running.pop(arg % len(running)))
        elif op == "idle" and not running:
            kv.idle_reclaim(now)
        check(kv, running, cfg)
    for seq in running:
        kv.free(seq)
    check(kv, [], cfg)
    assert kv.cache.pool.num_used == 0
    c = kv.cache
    event(f"evicted pages > 0: {c.num_evicted_pages > 0}")
    event(f"use after free > 0: {c.pool.use_after_free > 0}")
    event(f"overflow used: {bool(getattr(c.index, 'overflow', None))}")
