"""Sweep planning: grid order, random sampling, point configs, and bad input caught before running."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched.cli import main
from kvsched.sweep_spec import grid_values, load_sweep, parse_sweep
from kvsched.sweep_validate import set_path
from sim.config import ConfigError


def test_grid_points_in_product_order_with_resolved_configs(tiny_base):
    sweep = parse_sweep(
        {"base": tiny_base, "axes": {"cache.page_size": [16, 32], "seed": [1, 2, 3]}}
    )
    assert [p.index for p in sweep.points] == list(range(6))
    assert [(p.values["cache.page_size"], p.values["seed"]) for p in sweep.points] == [
        (16, 1),
        (16, 2),
        (16, 3),
        (32, 1),
        (32, 2),
        (32, 3),
    ]
    last = sweep.points[-1]
    assert (
        last.arm == "engine"
        and last.config["cache"]["page_size"] == 32
        and last.config["seed"] == 3
    )
    # The engine arm's overrides are applied before the axes; params are expanded with defaults.
    routing = last.config["policies"]["routing"]
    assert routing["name"] == "prefix_affinity" and routing["params"]["load_threshold"] == 0.9
    assert len({p.point_id for p in sweep.points}) == 6


def test_axes_override_the_arm_and_arm_axis_picks_overrides(tiny_base):
    sweep = parse_sweep(
        {
            "base": tiny_base,
            "axes": {"arm": ["openclaw", "engine"], "cache.prefix_cache": [False, True]},
        }
    )
    configs = {(p.arm, p.values["cache.prefix_cache"]): p.config for p in sweep.points}
    assert configs[("openclaw", True)]["cache"]["prefix_cache"] is True  # the axis beats the arm
    assert configs[("openclaw", True)]["cache"]["mechanism"] == "contiguous"
    assert configs[("engine", False)]["policies"]["routing"]["name"] == "prefix_affinity"


def test_base_from_path_relative_to_sweep_file(tmp_path, tiny_base, write_sweep):
    write_sweep(tiny_base, "base.yaml")
    sweep = load_sweep(write_sweep({"base": {"path": "base.yaml"}, "axes": {"seed": [4]}}))
    assert sweep.points[0].config["model"]["name"] == "llama-3-8b"
    assert sweep.points[0].config["seed"] == 4


def test_renaming_a_policy_resets_its_params():
    d = {"policies": {"routing": {"name": "prefix_affinity", "params": {"load_threshold": 0.5}}}}
    set_path(d, "policies.routing.name", "round_robin")
    assert d["policies"]["routing"] == {"name": "round_robin", "params": {}}
    set_path(d, "policies.routing.name", "round_robin")
    set_path(d, "policies.routing.params.x", 1)
    assert d["policies"]["routing"]["params"] == {"x": 1}


def test_random_sampling_is_a_seeded_subset(tiny_base):
    spec = {
        "base": tiny_base,
        "axes": {"seed": list(range(10)), "cache.page_size": [16, 32, 64]},
        "sampling": "random",
        "budget": 7,
        "sampling_seed": 3,
    }
    a, b = parse_sweep(spec), parse_sweep(spec)
    assert [p.index for p in a.points] == [p.index for p in b.points]
    assert len(a.points) == 7 and a.grid_size == 30
    assert [p.index for p in a.points] == sorted({p.index for p in a.points})
    other = parse_sweep({**spec, "sampling_seed": 4})
    assert [p.index for p in other.points] != [p.index for p in a.points]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_grid_values_enumerate_the_product(sizes):
    axes = {f"a{i}": [f"v{i}_{j}" for j in range(n)] for i, n in enumerate(sizes)}
    product = list(itertools.product(*axes.values()))
    assert [tuple(grid_values(axes, i).values()) for i in range(len(product))] == product


@pytest.mark.parametrize(
    ("axes", "extra", "needle"),
    [
        (
            {"cache.pagesize": [16]},
            {},
            "axes.cache.pagesize: no field 'pagesize' in cache; allowed:",
        ),
        ({"bogus": [1]}, {}, "axes.bogus: no field 'bogus' in the config"),
        ({"seed.x": [1]}, {}, "axes.seed.x: seed is a value, not a section"),
        (
            {"policies.routing.params.half_life_s": [1]},
            {},
            "axes.policies.routing.params.half_life_s: no field 'half_life_s' in policies.routing.params",
        ),
        ({"cache.page_size": []}, {}, "axes.cache.page_size: empty axis"),
        ({"cache.page_size": [16, "big"]}, {}, "axes.cache.page_size: value 'big':"),
        (
            {"cache.page_size": [16, 24]},
            {},
            "axes.cache.page_size: value 24: cache.page_size: must be a power of two",
        ),
        ({"duration_s": [1, -1]}, {}, "axes.duration_s: value -1:"),
        (
            {"policies.routing.params.load_threshold": ["high"]},
            {},
            "axes.policies.routing.params.load_threshold: value 'high': policies.routing.params.load_threshold",
        ),
        ({"workload.params.num_clients": [0]}, {}, "axes.workload.params.num_clients: value 0:"),
        ({"seed": [1, 1]}, {}, "axes.seed: duplicate value 1"),
        (
            {"model": ["llama-3-8b"], "model.num_layers": [2]},
            {},
            "axes.model.num_layers: overlaps axis model",
        ),
        ({"arms.x": [1]}, {}, "axes.arms.x: arms are not swept by path"),
        ({"arm": ["engine", "nope"]}, {}, "axes.arm: unknown arm 'nope'"),
        ({"seed": [1]}, {"arm": "nope"}, "arm: unknown arm 'nope'"),
        ({"seed": [1, 2]}, {"sampling": "random"}, "budget: sampling: random needs a budget"),
        ({"seed": [1, 2, 3]}, {"budget": 2}, "budget: the grid has 3 points, above budget 2"),
        ({"seed": 1}, {}, "axes.seed: Input should be a valid list"),
        ({}, {}, "axes: no axes"),
        ({"seed": [1]}, {"sampling": "sobol"}, "sampling:"),
    ],
)
def test_bad_axes_raise_config_error_naming_the_axis(tiny_base, axes, extra, needle):
    with pytest.raises(ConfigError) as err:
        parse_sweep({"base": tiny_base, "axes": axes, **extra})
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_several_base_arms_need_a_choice(tiny_base):
    base = {**tiny_base, "arms": {"a": {}, "b": {"cache": {"page_size": 32}}}}
    with pytest.raises(ConfigError, match=r"^arm: the base config has arms a, b; name one"):
        parse_sweep({"base": base, "axes": {"seed": [1]}})
    sweep = parse_sweep({"base": base, "axes": {"arm": ["a", "b"]}})
    assert [p.config["cache"]["page_size"] for p in sweep.points] == [16, 32]


def test_invalid_combination_names_the_point(tiny_base):
    # Each value is valid alone; together the model's weights no longer fit one GPU.
    axes = {
        "model": ["llama-3-8b", "llama-3-70b"],
        "node": [{"num_gpus": 2, "tp": 2}, {"num_gpus": 1, "tp": 1}],
    }
    with pytest.raises(ConfigError) as err:
        parse_sweep({"base": tiny_base, "axes": axes})
    assert str(err.value).startswith(
        "axes: the point model='llama-3-70b', node={'num_gpus': 1, 'tp': 1} "
        "is invalid: model: llama-3-70b weights"
    ), str(err.value)


def test_values_giving_the_same_config_are_rejected(tiny_base):
    with pytest.raises(
        ConfigError, match=r"axes.cache.page_size: values 16 and '16' give the same config"
    ):
        parse_sweep({"base": tiny_base, "axes": {"cache.page_size": [16, "16"]}})


@pytest.mark.parametrize(
    ("axes", "needle"),
    [
        ({"cache.no_such": [1]}, "axes.cache.no_such"),
        ({"cache.page_size": []}, "axes.cache.page_size"),
        ({"seed": ["x"]}, "axes.seed"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line_before_running(
    tmp_path, tiny_base, write_sweep, capsys, axes, needle
):
    out = tmp_path / "out"
    assert (
        main(
            ["sweep", write_sweep({"base": tiny_base, "axes": axes}), "--out", str(out), "--quiet"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert not out.exists()
