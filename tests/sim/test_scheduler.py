"""The pure scheduler, driven by hand with no SimPy: exact steps, hits, preemptions and times."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from policies.admission import Always, NoParams
from policies.eviction import LRU
from policies.scheduling import LongestContext, Newest
from sim.config import NodeConfig
from sim.kv.manager import PagedKV
from sim.kv.paged_cache import PagedKVCache
from sim.scheduler import Scheduler, Step
from sim.sequence import Sequence, Status, new_sequence
from tests.helpers import make_request

PAGE = 16


def make_scheduler(num_pages: int = 64, budget: int = 4096, watermark: float = 0.0, policy=None):
    cache = PagedKVCache(
        num_pages, PAGE, PAGE * 1024, eviction=LRU(NoParams()), admission=Always(NoParams())
    )
    cfg = NodeConfig(num_gpus=1, tp=1, max_num_batched_tokens=budget, admission_watermark=watermark)
    return Scheduler(cfg, PagedKV(cache, 1024), policy or Newest(NoParams())), cache


def seq_of(request_id: int, tokens, output_tokens: int = 2) -> Sequence:
    return new_sequence(make_request(request_id, tokens, output_tokens), PAGE, 64, 0.0)


def shape(step: Step) -> list[tuple[int, int, bool]]:
    return [(s.req.request_id, n, pre) for s, n, pre in step.items]


def run_until_idle(sched: Scheduler, step_s: float = 0.01, now: float = 0.0):
    """Drive the scheduler as any executor would: plan, take step_s, apply."""
    shapes, finished = [], []
    while sched.has_work():
        step = sched.schedule(now)
        assert step.items, "work but nothing runnable: would sleep forever"
        shapes.append(shape(step))
        now += step_s
        finished += sched.apply(step, now)
    return shapes, finished, now


def test_the_scheduler_module_does_not_import_simpy():
    code = "import sys, sim.scheduler, sim.executor; assert 'simpy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_chunked_prefill_then_decodes_with_exact_times():
    sched, cache = make_scheduler(budget=32)
    seq = seq_of(0, np.arange(80), output_tokens=3)
    sched.add(seq)
    shapes, finished, _ = run_until_idle(sched)
    prefill = [[(0, 32, True)], [(0, 32, True)], [(0, 16, True)]]
    assert shapes == prefill + [[(0, 1, False)]] * 2
    assert finished == [seq] and seq.status is Status.FINISHED
    assert np.isclose(seq.first_token_s, 0.03) and np.isclose(seq.finish_s, 0.05)
    assert seq.scheduled_s == 0.0
    cache.pool.check_invariants()


def test_a_prefix_hit_starts_the_chunk_after_the_cached_pages():
    sched, cache = make_scheduler()
    shared = np.arange(48)  # 3 full pages
    a = seq_of(0, np.concatenate([shared, [900, 901]]), output_tokens=1)
    b = seq_of(1, np.concatenate([shared, np.arange(1000, 1007)]), output_tokens=1)
    sched.add(a)
    run_until_idle(sched)
    sched.add(b)
    step = sched.schedule(1.0)
    assert shape(step) == [(1, 7, True)] and step.admitted == [b]
    assert b.num_computed == 48 and b.cached_tokens == 48
    assert sched.apply(step, 1.01) == [b]
    cache.pool.check_invariants()


def test_out_of_pages_preempts_the_newest_and_requeues_it_first():
    sched, cache = make_scheduler(num_pages=4)
    a = seq_of(0, np.arange(100, 124), output_tokens=12)
    b = seq_of(1, np.arange(200, 224), output_tokens=12)
    sched.add(a)
    sched.add(b)
    now, preempted_at = 0.0, None
    while preempted_at is None:
        step = sched.schedule(now)
        if step.preempted:
            preempted_at = (now, step.preempted, shape(step))
            break
        now += 0.01
        sched.apply(step, now)
    t, victims, items = preempted_at
    # Step 10 (t = 0.09): a's 33rd token faults a page; b (the newest) gives way.
    assert np.isclose(t, 0.09) and victims == [b] and items == [(0, 1, False)]
    assert list(sched.waiting) == [b] and b.status is Status.WAITING and b.num_computed == 0
    assert sched.num_preemptions == 1 and b.recomputed_outputs == 9


def test_the_scheduling_policy_picks_the_victim():
    sched, _ = make_scheduler(num_pages=6, policy=LongestContext(NoParams()))
    a = seq_of(0, np.arange(100, 140), output_tokens=20)  # 3 pages
    b = seq_of(1, np.arange(200, 220), output_tokens=20)  # 2 pages
    sched.add(a)
    sched.add(b)
    now = 0.0
    while True:
        step = sched.schedule(now)
        if step.preempted:
            break
        now += 0.01
        sched.apply(step, now)
    assert step.preempted == [a]  # the longest context, although b is the newest


def test_the_admission_headroom_keeps_the_queue_waiting():
    # 8 pages, watermark 0.5: a 5-page prompt would leave 3 pages free (< 4): not admitted.
    sched, cache = make_scheduler(num_pages=8, watermark=0.5)
    sched.add(seq_of(0, np.arange(70)))
    step = sched.schedule(0.0)
    assert step.items == [] and len(sched.waiting) == 1
    assert cache.pool.num_used == 0  # the placement was rolled back
