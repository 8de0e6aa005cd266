"""`kvsched tune`: the template's sweep, the choice under a P99 limit, the written config."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from kvsched.cli import main
from kvsched.sweep_spec import parse_sweep
from kvsched.sweep_store import SweepStore, write_parquet
from kvsched.tune import TUNE_AXES, choose, tune_spec, write_choice


def test_tune_spec_sweeps_the_template_on_the_models_config(tiny_base):
    spec = tune_spec(
        "llama-3-70b",
        {**tiny_base, "node": {"num_gpus": 2, "tp": 2}},
        workload=None,
        duration_s=None,
        seeds=[1, 2],
        budget=None,
    )
    sweep = parse_sweep(spec)
    assert len(sweep.points) == 2 * len(pd.MultiIndex.from_product(list(TUNE_AXES.values())))
    config = sweep.points[0].config
    assert (
        config["model"]["name"] == "llama-3-70b" and config["duration_s"] == tiny_base["duration_s"]
    )
    assert config["policies"]["eviction"]["name"] == "scored"
    assert config["policies"]["admission"] == {"name": "threshold", "params": {"min_tokens": None}}
    assert config["cache"]["protected_zone"] is True and config["cache"]["page_size"] == 8
    sampled = tune_spec("llama-3-8b", {}, workload="multi_turn", duration_s=5, seeds=[1], budget=10)
    assert sampled["sampling"] == "random" and sampled["budget"] == 10
    assert (
        sampled["base"]["workload"] == {"name": "multi_turn"} and sampled["base"]["duration_s"] == 5
    )


def _fake_tune_dir(tmp_path, tiny_base):
    spec = tune_spec("llama-3-8b", tiny_base, None, None, [1], None)
    spec["axes"] = {
        "cache.page_size": [16, 32, 64],
        "policies.admission.params.min_tokens": [None, 64],
    }
    sweep = parse_sweep(spec)
    store = SweepStore(tmp_path / "t", sweep)
    store.open()
    for p in sweep.points:  # throughput grows with the page size, and so does P99 TTFT
        size = p.values["cache.page_size"]
        bonus = 1 if p.values["policies.admission.params.min_tokens"] is None else 0
        store.append(
            {
                "point_id": p.point_id,
                "index": p.index,
                "arm": p.arm,
                "values": p.values,
                "status": "ok",
                "error": None,
                "wall_s": 1.0,
                "metrics": {
                    "output_throughput": size + bonus,
                    "p99_ttft_ms": 10.0 * size,
                    "prefix_hit_rate": 0.5,
                    "p99_tpot_ms": 1.0,
                },
            }
        )
    store.write_table()
    return tmp_path / "t"


def test_choice_respects_the_p99_limit_and_writes_a_runnable_config(tmp_path, tiny_base):
    out = _fake_tune_dir(tmp_path, tiny_base)
    assert choose(out, "throughput", None)["cache.page_size"] == 64
    row = choose(out, "throughput", 400.0)
    assert row["cache.page_size"] == 32 and row["policies.admission.params.min_tokens"] == "null"
    assert choose(out, "throughput", 1.0) is None
    write_choice(out, row, "throughput", 400.0)
    tuned = yaml.safe_load((out / "tuned.yaml").read_text())
    assert (
        tuned["cache"]["page_size"] == 32
        and tuned["policies"]["admission"]["params"]["min_tokens"] is None
    )
    choice = (out / "choice.md").read_text()
    assert (
        "chosen (point 2): cache.page_size=32, policies.admission.params.min_tokens=null" in choice
    )
    assert "- cache.page_size (spread " in choice and "16: 16.5, 32: 32.5, 64: 64.5" in choice
    assert write_parquet(
        pd.read_csv(out / "sweep.csv"), out / "t.parquet"
    )  # null + ints in one column


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", "gpt-9"], "--model: unknown preset 'gpt-9'"),
        (["--model", "llama-3-8b", "--workload", "nope"], "workload.name"),
    ],
)
def test_tune_bad_input_exits_2(tmp_path, capsys, argv, needle):
    assert main(["tune", *argv, "--out", str(tmp_path / "t"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "t").exists()
