"""Cascade decode pricing: groups found from block tables, every group's shared tokens priced in
one prefix pass (the kernel's one launch)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cascade import CascadeExecutor, prefix_pass, shared_prefix_groups
from sim.config import parse_config
from sim.executor import ModelledExecutor
from sim.latency import make_latency_model
from sim.latency.base import StepShape
from sim.scheduler import Step
from sim.sequence import new_sequence
from tests.helpers import make_request

PAGE = 16


def decode(request_id: int, pages: list[int]):
    seq = new_sequence(make_request(request_id, np.arange(8)), PAGE, 64, 0.0)
    seq.pages = list(pages)
    seq.num_computed = len(pages) * PAGE - 3  # the last page is partly written
    return (seq, 1, False)


def test_groups_are_leading_full_pages_shared_by_two_or_more_decodes():
    items = [
        decode(0, [7, 8, 9, 20]),
        decode(1, [7, 8, 9, 21, 22]),
        decode(2, [7, 8, 30]),
        decode(3, [40, 41]),  # alone: no group
    ]
    # 0, 1 and 2 share pages 7 and 8 (page 9 only 0 and 1: the group takes what all share).
    assert shared_prefix_groups(items, PAGE) == [(3, 2 * PAGE)]
    assert shared_prefix_groups(items[:2], PAGE) == [(2, 3 * PAGE)]


def test_cascade_prices_tails_plus_one_prefix_pass_per_group():
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    shared = list(range(128))  # 2,048 shared tokens
    items = [decode(i, [*shared, 1000 + 2 * i, 1001 + 2 * i]) for i in range(32)]
    step = Step(items=items)
    cascade = CascadeExecutor(latency, None, PAGE).run_step(0, step, 0.0)
    tail_sum = step.shape().decode_ctx_sum - 32 * 2048
    expected = latency.shape_time_s(StepShape([], [], 32, tail_sum))
    expected += latency.cascade_prefix_s(32, 2048)
    assert cascade == pytest.approx(expected, rel=1e-12)
    plain = ModelledExecutor(latency).run_step(0, step, 0.0)
    assert cascade < plain  # the shared prefix is read once instead of 32 times


def test_groups_of_a_step_are_priced_as_one_prefix_pass():
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    a, b = list(range(128)), list(range(200, 264))  # 2,048 and 1,024 shared tokens
    items = [decode(i, [*a, 1000 + i]) for i in range(16)]
    items += [decode(100 + i, [*b, 2000 + i]) for i in range(48)]
    step = Step(items=items)
    groups = [(16, 2048), (48, 1024)]
    assert shared_prefix_groups(items, PAGE) == groups
    assert prefix_pass(groups) == (64, 16 * 2048 + 48 * 1024)
    cascade = CascadeExecutor(latency, None, PAGE).run_step(0, step, 0.0)
    tail_sum = step.shape().decode_ctx_sum - (16 * 2048 + 48 * 1024)
    expected = latency.shape_time_s(StepShape([], [], 64, tail_sum))
    expected += latency.cascade_prefix_s(64, 1280)  # (16 x 2048 + 48 x 1024) / 64 tokens
    assert cascade == pytest.approx(expected, rel=1e-12)
    per_group = sum(latency.cascade_prefix_s(s, t) for s, t in groups)
    assert latency.cascade_prefix_s(64, 1280) <= per_group


def test_a_step_where_the_cascade_does_not_pay_runs_the_plain_kernel():
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    step = Step(items=[decode(i, [0, 1, 10 + i]) for i in range(2)])  # 2 x 32 shared tokens
    plain = ModelledExecutor(latency).run_step(0, step, 0.0)
    cascade = CascadeExecutor(latency, None, PAGE).run_step(0, step, 0.0)
    assert cascade == plain  # an extra launch for 32 shared tokens costs more than it saves
