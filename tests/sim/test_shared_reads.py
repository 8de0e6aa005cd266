"""Decodes that read pages another decode of the step reads: the shares found from the block
tables, the measured model's shape, a span's prices equal to the step-by-step ones, the fit."""

from __future__ import annotations

import numpy as np
import pytest

from policies import make_policy
from sim.cascade import CascadeExecutor, DecodeBatchExecutor, shared_reads, span_groups
from sim.cluster import Cluster
from sim.config import parse_config
from sim.latency import make_latency_model
from sim.latency.base import StepShape, prices_decode_batch
from sim.latency.ragged import RaggedDecode, fit_ragged_decode
from sim.latency.shared_reads import SharedReads, fit_shared_reads, predicted_ratios
from sim.scheduler import Step
from sim.sequence import new_sequence
from tests.helpers import make_request
from workloads.registry import make_workload

PAGE = 16


def decode(request_id: int, pages: list[int], context: int):
    seq = new_sequence(make_request(request_id, np.arange(8)), PAGE, 64, 0.0)
    seq.pages = list(pages)
    seq.num_computed = context - 1  # Step.shape counts num_computed + 1
    return (seq, 1, False)


def latency(shared_page_reads: str = "l2"):
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    gpu = cfg.gpu.model_copy(update={"shared_page_reads": shared_page_reads})
    return make_latency_model(cfg.model, gpu, cfg.node.tp)


def test_shared_tokens_and_prefix_share_from_block_tables():
    items = [
        decode(0, [7, 8, 20], 40),
        decode(1, [7, 8, 21, 22], 60),
        decode(2, [7, 8, 30], 35),
        decode(3, [40, 41], 20),  # alone
    ]
    assert shared_reads(items, PAGE) == 2 * 32  # two of the three read 32 shared tokens again
    assert shared_reads(items[3:], PAGE) == 0


def test_model_keeps_the_table_without_sharing_and_falls_towards_rho():
    model = SharedReads(rho=0.7, p=3.0)
    assert model.effective_tokens(10_000, 0) == 10_000
    less = [model.effective_tokens(10_000, s) for s in (1000, 4000, 9000)]
    assert less[0] > less[1] > less[2] > 10_000 * 0.7 / (1 + 0.7**3) ** (1 / 3)


def test_h200_prices_decode_batch_when_asked_and_a_shared_step_costs_less():
    assert not prices_decode_batch(latency("hbm"))  # the default: as distinct pages
    lat = latency()
    assert prices_decode_batch(lat)
    plain = lat.shape_time_s(StepShape([], [], 32, 32 * 2300))
    shared = lat.shape_time_s(StepShape([], [], 32, 32 * 2300, 31 * 2048))
    assert shared < plain
    assert latency("hbm").shape_time_s(StepShape([], [], 32, 32 * 2300, 31 * 2048)) == plain


def grow(items):
    """One decode step on: every context one token longer, a fresh page where one fills."""
    for seq, _, _ in items:
        seq.num_computed += 1
        if seq.num_computed + 1 > len(seq.pages) * PAGE:
            seq.pages.append(10_000 + seq.req.request_id * 100 + len(seq.pages))


def assert_span_prices_each_step(executor, items, steps: int) -> None:
    """The executor's span prices from step 0's batch equal its step-by-step prices of the
    batch decoding on, float for float."""
    step = Step(items=items)
    first = step.shape().decode_ctx_sum + len(items)
    sums = [first + k * len(items) for k in range(steps)]
    span = executor.decode_span_prices(step, sums)
    assert span is not None
    for k in range(steps):
        grow(items)
        assert Step(items=items).shape().decode_ctx_sum == sums[k]
        assert span[k] == executor.compute_s(Step(items=items))


def test_a_span_prices_each_step_as_the_step_by_step_executor_does():
    lat = latency()
    shared = list(range(64))  # 1,024 shared tokens
    items = [decode(i, [*shared, 1000 + i], 1024 + 5 + i) for i in range(24)]
    items += [decode(100 + i, [500 + 2 * i, 501 + 2 * i], 30) for i in range(8)]  # unshared
    assert_span_prices_each_step(DecodeBatchExecutor(lat, None, PAGE), items, 20)


def test_no_span_while_a_members_last_page_holds_the_share_down():
    shared = list(range(4))
    items = [decode(0, shared, 64), decode(1, [*shared, 900], 70)]  # 0: every page shared
    assert span_groups(items, PAGE, None) is None
    assert shared_reads(items, PAGE) == 3 * PAGE


def test_fit_recovers_the_parameters_it_was_generated_with():
    def price(batch: int, ctx: float) -> float:  # a launch floor plus bytes
        return 0.02 + 1e-5 * batch * ctx

    truth = SharedReads(0.6, 4.0)
    rng = np.random.default_rng(0)
    points = []
    for _ in range(60):
        batch, total = int(rng.integers(8, 128)), int(rng.integers(20_000, 400_000))
        points.append((batch, total, int(total * rng.uniform(0.05, 0.9)), 0.0))
    ratios = predicted_ratios(truth, points, price)
    points = [(*p[:3], float(r)) for p, r in zip(points, ratios, strict=True)]
    model, errors = fit_shared_reads([(points, price)])
    assert (model.rho, model.p) == (0.6, 4.0)
    assert np.abs(errors[0]).max() == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    ("prefix_cache", "reads", "kind"),
    [(True, "l2", "DecodeBatch"), (False, "l2", "DecodeBatch"), (True, "hbm", "Modelled")],
)
def test_cluster_prices_decode_batch_with_a_prefix_cache_when_asked(prefix_cache, reads, kind):
    cfg = parse_config(
        {
            "model": "llama-3-8b",
            "gpu": {"preset": "h200", "shared_page_reads": reads},
            "node": {"num_gpus": 1, "tp": 1},
            "cache": {"prefix_cache": prefix_cache},
            "workload": {"name": "no_sharing", "params": {"num_requests": 2}},
            "duration_s": 1,
        }
    )
    workload = make_workload("no_sharing", {"num_requests": 2}, np.random.default_rng(0))
    cluster = Cluster(cfg, workload, np.random.default_rng(1), make_policy)
    assert type(cluster.nodes[0].executor).__name__ == f"{kind}Executor"


def test_ragged_factor_grows_with_the_spread_saturates_and_shrinks_with_the_mean():
    model = RaggedDecode(a=0.1, b=0.5, e=0.75)
    assert model.factor(4096, 4096) == 1.0  # equal lengths: the table as measured
    spread = [model.factor(2048, m) for m in (2300, 3072, 8192, 30000)]
    assert 1.0 < spread[0] < spread[1] < spread[2] < spread[3] < 1.1
    assert spread[3] - spread[2] < 1e-3  # one long context already sets the split
    assert model.factor(8192, 8192 * 4) < model.factor(2048, 2048 * 4)


def test_ragged_fit_recovers_the_parameters_it_was_generated_with():
    truth = RaggedDecode(0.08, 0.5, 0.5)
    rng = np.random.default_rng(1)
    points = []
    for _ in range(50):
        mean = float(rng.uniform(1000, 16000))
        longest = int(mean * rng.uniform(1.0, 6.0))
        points.append((mean, longest, truth.factor(mean, longest)))
    model, errors = fit_ragged_decode(points)
    assert (model.a, model.b, model.e) == (0.08, 0.5, 0.5)
    assert np.abs(errors).max() == pytest.approx(0.0, abs=1e-12)


def test_a_ragged_span_prices_each_step_as_the_step_by_step_executor_does():
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    gpu = cfg.gpu.model_copy(update={"shared_page_reads": "l2", "ragged_decode": "measured"})
    lat = make_latency_model(cfg.model, gpu, cfg.node.tp)
    shared = list(range(32))  # 512 shared tokens
    items = [decode(i, [*shared, 1000 + i], 512 + 3 + i) for i in range(12)]
    items += [decode(100, [*range(5000, 5000 + 600)], 600 * PAGE - 20)]  # one long context
    executor = DecodeBatchExecutor(lat, None, PAGE)
    step = Step(items=items)
    assert executor.compute_s(step) != lat.shape_time_s(step.shape())  # both terms move it
    assert_span_prices_each_step(executor, items, 12)


@pytest.mark.parametrize("terms", [{}, {"shared_page_reads": "l2", "ragged_decode": "measured"}])
def test_a_cascade_span_prices_each_step_as_the_step_by_step_executor_does(terms):
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    lat = make_latency_model(cfg.model, cfg.gpu.model_copy(update=terms), cfg.node.tp)
    a, b = list(range(128)), list(range(200, 264))  # 2,048 and 1,024 shared tokens
    items = [decode(i, [*a, 1000 + i], 2048 + 7 + i) for i in range(40)]
    items += [decode(100 + i, [*b, 2000 + i], 1024 + 9) for i in range(30)]
    assert_span_prices_each_step(CascadeExecutor(lat, None, PAGE), items, 16)


@pytest.mark.parametrize(
    ("field", "value", "key"),
    [
        ("shared_page_reads", "l2", "decode_shared_reads"),
        ("ragged_decode", "measured", "decode_ragged"),
    ],
)
def test_a_term_asked_for_without_its_entry_names_the_field_and_the_way_out(
    tmp_path, field, value, key
):
    import json
    from pathlib import Path

    from sim.latency.calibrated import CalibrationError, calibrated_latency_for

    cal = json.loads(
        (Path(__file__).resolve().parents[2] / "kernels/calibration/h200.json").read_text()
    )
    del cal[key]
    (tmp_path / "h200.json").write_text(json.dumps(cal))
    cfg = parse_config({"model": "llama-3-8b", "node": {"num_gpus": 1, "tp": 1}})
    gpu = cfg.gpu.model_copy(update={field: value})
    with pytest.raises(CalibrationError, match=f"gpu.{field}: {value} needs a {key} entry"):
        calibrated_latency_for(cfg.model, gpu, 1, tmp_path)
    assert calibrated_latency_for(cfg.model, cfg.gpu, 1, tmp_path) is not None  # off: fine


def test_a_measured_term_without_a_calibrated_table_is_a_config_error():
    from sim.config import ConfigError

    cfg = parse_config({"model": "llama-3-8b", "gpu": "h100", "node": {"num_gpus": 1, "tp": 1}})
    assert cfg.gpu.calibration is None
    with pytest.raises(ConfigError, match="need a calibration file"):
        make_latency_model(cfg.model, cfg.gpu.model_copy(update={"ragged_decode": "measured"}), 1)
    make_latency_model(cfg.model, cfg.gpu, 1)  # the roofline, as before
