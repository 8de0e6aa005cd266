"""Sweep analysis and report on hand-built sweep directories: exact fronts, bests, escaping."""

from __future__ import annotations

import re

import pandas as pd
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched.sweep_spec import parse_sweep
from kvsched.sweep_store import SweepStore
from reports.sweep_analysis import (
    best_by,
    configurations,
    load_sweep_dir,
    pareto_front,
    pasteable_yaml,
)
from reports.sweep_report import best_configs_text, write_sweep_report


def fake_sweep(tmp_path, base, axes, metrics_of, name="fake"):
    """A sweep directory whose metrics come from `metrics_of(values)` instead of simulations."""
    sweep = parse_sweep({"name": name, "base": base, "axes": axes})
    store = SweepStore(tmp_path / "sw", sweep)
    store.open()
    for p in sweep.points:
        metrics = metrics_of(p.values)
        store.append(
            {
                "point_id": p.point_id,
                "index": p.index,
                "arm": p.arm,
                "values": p.values,
                "status": "failed" if metrics is None else "ok",
                "metrics": metrics or {},
                "error": "RuntimeError: boom" if metrics is None else None,
                "wall_s": 0.5,
            }
        )
    store.write_table()
    return tmp_path / "sw"


def metrics(thr, ttft, hit, tpot=10.0):
    return {
        "output_throughput": thr,
        "p99_ttft_ms": ttft,
        "prefix_hit_rate": hit,
        "p99_tpot_ms": tpot,
        "mean_ttft_ms": ttft / 2,
        "preemptions": 0,
    }


def test_configurations_average_seeds_and_objectives_pick_exact_points(tmp_path, tiny_base):
    table = {
        (16, 1): metrics(100, 50, 0.5),
        (16, 2): metrics(200, 70, 0.7),  # mean 150, 60, 0.6
        (32, 1): metrics(180, 40, 0.4),
        (32, 2): metrics(180, 60, 0.4),  # mean 180, 50, 0.4
        (64, 1): metrics(90, 30, 0.3),
        (64, 2): None,
    }  # one failed seed
    out = fake_sweep(
        tmp_path,
        tiny_base,
        {"cache.page_size": [16, 32, 64], "seed": [1, 2]},
        lambda v: table[(v["cache.page_size"], v["seed"])],
    )
    data = load_sweep_dir(out)
    configs = configurations(data)
    assert configs["cache.page_size"].tolist() == [16, 32, 64]
    assert configs.output_throughput.tolist() == [150, 180, 90] and configs.seeds.tolist() == [
        2,
        2,
        1,
    ]
    assert configs.point.tolist() == [0, 2, 4]
    assert best_by(configs, "throughput")["cache.page_size"] == 32
    assert best_by(configs, "p99_ttft")["cache.page_size"] == 64
    assert best_by(configs, "hit_rate")["cache.page_size"] == 16
    front = pareto_front(configs, "prefix_hit_rate", "max", "p99_ttft_ms", "min")
    assert front["cache.page_size"].tolist() == [
        64,
        32,
        16,
    ]  # 0.3@30, 0.4@50, 0.6@60: none dominated
    front = pareto_front(configs, "output_throughput", "max", "p99_ttft_ms", "min")
    assert front["cache.page_size"].tolist() == [64, 32]  # 16 is beaten by 32 on both
    text = best_configs_text(out)
    assert (
        "best throughput (max output throughput (tok/s) = 180): cache.page_size=32 (point 2)"
        in text
    )


def test_pasteable_yaml_is_the_points_config_under_a_fresh_arm(tmp_path, tiny_base):
    out = fake_sweep(
        tmp_path, tiny_base, {"cache.page_size": [16, 32]}, lambda v: metrics(1, 1, 0.1)
    )
    config = yaml.safe_load(pasteable_yaml(load_sweep_dir(out), 1))
    assert config["cache"]["page_size"] == 32 and config["arms"] == {"engine-tuned": {}}
    assert config["model"]["name"] == "llama-3-8b"


def test_report_has_plots_per_metric_fronts_and_escapes_every_string(tmp_path, tiny_base):
    hostile = "<script>alert('x')</script> & $x^2$"
    out = fake_sweep(
        tmp_path,
        tiny_base,
        {"name": [hostile, "plain"], "cache.page_size": [16, 32]},
        lambda v: metrics(100 + v["cache.page_size"], 60 - v["cache.page_size"], 0.5),
        name="<b>sweep</b>",
    )
    write_sweep_report(out, out / "report.html")
    page = (out / "report.html").read_text()
    assert "<script" not in page and "<b>sweep" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; $x^2$" in page
    assert "Heatmaps over" not in page  # two varying axes: heatmaps with no axis averaged away
    # 6 headline metrics present -> 6 heatmaps, plus 2 Pareto plots.
    assert page.count("<svg") == 8
    assert (
        not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)", page) and "<link" not in page
    )  # self-contained


def test_one_varying_axis_gives_line_plots_and_failed_points_are_listed(tmp_path, tiny_base):
    out = fake_sweep(
        tmp_path,
        tiny_base,
        {"cache.page_size": [16, 32, 64]},
        lambda v: None if v["cache.page_size"] == 64 else metrics(v["cache.page_size"], 10, 0.2),
    )
    write_sweep_report(out, out / "report.html")
    page = (out / "report.html").read_text()
    assert (
        page.count("<svg") == 8
        and "RuntimeError: boom" in page
        and "2 of 3 points ok, 1 failed" in page
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=25))
def test_pareto_front_is_exactly_the_undominated_points(pairs):
    df = pd.DataFrame(
        {"x": [a for a, _ in pairs], "y": [b for _, b in pairs], "point": range(len(pairs))}
    )
    front = pareto_front(df, "x", "max", "y", "min")

    def dominated(i):
        return any(
            df.x[j] >= df.x[i] and df.y[j] <= df.y[i] and (df.x[j], df.y[j]) != (df.x[i], df.y[i])
            for j in range(len(df))
        )

    undominated = {(df.x[i], df.y[i]) for i in range(len(df)) if not dominated(i)}
    assert set(zip(front.x, front.y, strict=True)) == undominated
    assert len(front) == len(undominated)  # one row per distinct undominated value pair
