"""A node's serve loop on hand-built requests: exact hit tokens, times and preemptions."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from policies.admission import Always, NoParams
from policies.eviction import LRU
from sim.config import NodeConfig
from sim.kv.manager import PagedKV
from sim.kv.paged_cache import PagedKVCache
from sim.sequence import Sequence, Status
from tests.helpers import ConstantLatency, make_request, sim_node, submit_at

PAGE = 16


def make_node(num_pages: int = 64, budget: int = 4096, step_s: float = 0.01):
    env = simpy.Environment()
    cache = PagedKVCache(
        num_pages, PAGE, PAGE * 1024, eviction=LRU(NoParams()), admission=Always(NoParams())
    )
    finished: list[Sequence] = []
    node = sim_node(
        env,
        0,
        NodeConfig(num_gpus=1, tp=1, max_num_batched_tokens=budget),
        PagedKV(cache, 1024),
        ConstantLatency(step_s),
        finished.append,
    )
    return env, node, cache, finished


def test_second_request_reuses_exactly_three_shared_pages():
    env, node, cache, finished = make_node()
    shared = np.arange(48)  # 3 full pages
    a = submit_at(
        env, node, 0.0, make_request(0, np.concatenate([shared, [900, 901, 902, 903, 904]]))
    )
    b = submit_at(env, node, 0.05, make_request(1, np.concatenate([shared, np.arange(1000, 1007)])))
    env.run(until=1.0)
    assert [s.req.request_id for s in finished] == [0, 1]
    assert a.cached_tokens == 0 and b.cached_tokens == 48
    # a: prefill step ends at 0.01 (first token), one decode step ends at 0.02.
    assert (a.first_token_s, a.finish_s) == pytest.approx((0.01, 0.02), abs=1e-12)
    assert (b.first_token_s, b.finish_s) == pytest.approx((0.06, 0.07), abs=1e-12)
    cache.pool.check_invariants()


def test_chunked_prefill_emits_the_first_token_after_the_last_chunk():
    env, node, cache, finished = make_node(budget=32)
    seq = submit_at(env, node, 0.0, make_request(0, np.arange(80), output_tokens=3))
    env.run(until=1.0)
    # 80 prompt tokens in chunks of 32, 32, 16: first token after step 3, then 2 decode steps.
    assert np.isclose(seq.first_token_s, 0.03) and np.isclose(seq.finish_s, 0.05)
    assert node.num_steps == 5 and seq.status is Status.FINISHED


def test_out_of_pages_preempts_the_newest_request_and_both_finish():
    # 4 pages of 16 tokens: two 24-token prompts take 2 pages each; the first decode page fault
    # (token 33 of either) cannot be served, so the newest request is preempted and recomputed.
    env, node, cache, finished = make_node(num_pages=4)
    a = submit_at(env, node, 0.0, make_request(0, np.arange(100, 124), output_tokens=12))
    b = submit_at(env, node, 0.0, make_request(1, np.arange(200, 224), output_tokens=12))
    env.run(until=5.0)
    assert a.status is Status.FINISHED and b.status is Status.FINISHED
    assert a.preemptions == 0 and b.preemptions == 1 and node.num_preemptions == 1
    # Step 10: a's page fault preempts b after 9 outputs. a finishes at step 12; b recomputes its
    # prompt and those 9 outputs in step 13 (its first page is a cache hit) and samples output 10
    # in that same step, as vLLM does; outputs 11 and 12 follow: done at step 15.
    assert b.recomputed_outputs == 9
    assert (a.finish_s, b.finish_s) == pytest.approx((0.12, 0.15), abs=1e-9)
    assert node.num_steps == 15
    cache.pool.check_invariants()
    assert cache.pool.num_used == 0


def test_reference_counts_follow_sharing():
    env, node, cache, finished = make_node()
    shared = np.arange(32)  # 2 full pages
    submit_at(env, node, 0.0, make_request(0, np.concatenate([shared, [7] * 3]), output_tokens=50))
    submit_at(env, node, 0.02, make_request(1, np.concatenate([shared, [8] * 3]), output_tokens=50))
    env.run(until=0.1)  # both running: the two shared pages have two references each
    shared_pages = [p for p in range(cache.pool.num_pages) if cache.pool.ref_count[p] == 2]
    assert len(shared_pages) == 2
    env.run(until=5.0)
    assert len(finished) == 2 and int(cache.pool.ref_count.sum()) == 0
    cache.pool.check_invariants()


def test_a_blocked_waiting_head_records_its_prefix_hit_once():
    # 8 pages. C caches a 2-page prefix and finishes. A (4 pages of prompt, long output) runs;
    # B shares C's prefix but needs 4 new pages, so it waits at the head of the queue, placed
    # and rolled back every step, until A finishes. Its hit is recorded once, when admitted.
    env, node, cache, finished = make_node(num_pages=8, budget=4096)
    shared = np.arange(32)
    submit_at(env, node, 0.0, make_request(0, np.concatenate([shared, [5]]), output_tokens=1))
    a = submit_at(env, node, 0.05, make_request(1, np.arange(500, 563), output_tokens=30))
    b = submit_at(
        env,
        node,
        0.06,
        make_request(2, np.concatenate([shared, np.arange(900, 960)]), output_tokens=1),
    )
    env.run(until=5.0)
    assert [s.req.request_id for s in finished] == [0, 1, 2]
    assert b.first_token_s > a.finish_s  # B waited through many steps
    shared_pages = [
        p
        for p in range(cache.pool.num_pages)
        if cache.index.indexed[p]
        and cache.index.page_tokens.tokens(p).max() < len(shared)  # a page of the shared prefix
    ]
    assert len(shared_pages) == 2
    assert cache.stats.hit_count[shared_pages].tolist() == [2, 2]  # stored by C, hit once by B
    assert b.cached_tokens == 32 and b.false_hits == 0


def test_an_idle_node_wakes_when_cached_pages_leave_the_race_window():
    # Epoch reclamation with readers outliving each step by 0.5 s: A's cached pages cannot be
    # evicted before 0.5 s after its last step. B needs them; the idle node must wake by itself.
    env = simpy.Environment()
    cache = PagedKVCache(
        8,
        PAGE,
        PAGE * 1024,
        eviction=LRU(NoParams()),
        admission=Always(NoParams()),
        race_window_s=0.5,
    )
    finished: list[Sequence] = []
    node = sim_node(
        env,
        0,
        NodeConfig(num_gpus=1, tp=1, admission_watermark=0.0),
        PagedKV(cache, 1024),
        ConstantLatency(0.01),
        finished.append,
    )
    submit_at(env, node, 0.0, make_request(0, np.arange(64), output_tokens=1))
    b = submit_at(env, node, 0.02, make_request(1, np.arange(1000, 1090), output_tokens=1))
    env.run(until=10.0)
    assert b.status is Status.FINISHED
    assert 0.5 < b.first_token_s < 0.6


def test_takeable_pages_leave_out_cached_pages_a_reader_may_still_hold():
    env = simpy.Environment()
    cache = PagedKVCache(
        8,
        PAGE,
        PAGE * 1024,
        eviction=LRU(NoParams()),
        admission=Always(NoParams()),
        race_window_s=0.5,
    )
    node = sim_node(
        env,
        0,
        NodeConfig(num_gpus=1, tp=1, admission_watermark=0.0),
        PagedKV(cache, 1024),
        ConstantLatency(0.01),
        lambda seq: None,
    )
    submit_at(env, node, 0.0, make_request(0, np.arange(64), output_tokens=1))
    env.run(until=0.1)  # finished at 0.01: its 4 full pages stay cached, readers until ~0.51
    assert cache.pool.num_cached == 4 and cache.available_pages() == 8
    assert cache.takeable_pages(0.1) == 4
    assert cache.takeable_pages(0.6) == 8
