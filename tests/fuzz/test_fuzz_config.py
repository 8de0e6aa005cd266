"""Hypothesis-generated experiment configs through `kvsched run`: exit 0 or 2, never a traceback,
no user file lost, nothing partial (tests/fuzz/fuzz_harness.py)."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import yaml
from fuzz_harness import TINY, check_case, make_user_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Fields a mutation may hit (dotted paths into the tiny config), including unknown ones.
PATHS = [
    "seed",
    "duration_s",
    "sample_interval_s",
    "name",
    "model",
    "gpu",
    "node.num_gpus",
    "node.tp",
    "node.kv_memory_fraction",
    "node.max_num_seqs",
    "cluster.num_nodes",
    "cache.page_size",
    "cache.mechanism",
    "cache.prefix_cache",
    "cache.hash_bits",
    "cache.protected_share",
    "router.lanes",
    "router.decision_time_s",
    "policies.routing",
    "policies.eviction.name",
    "policies.eviction.params.half_life_s",
    "workload.name",
    "workload.params.num_clients",
    "workload.params.input_max",
    "workload.params.output_min",
    "network.link",
    "placement.policy",
    "arms",
    "arms.x",
    "arms.x.cache.page_size",
    "no_such_field",
    "model.num_layers",
]

# Hostile values; numbers are either invalid or small enough for a 2-second tiny run.
SCALARS = st.one_of(
    st.booleans(),
    st.none(),
    st.sampled_from(
        [float("nan"), float("inf"), -float("inf"), 1e308, -1, 0, 1, 2, 3, 0.5, 1e-9, 2**64]
    ),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "inf", "nan", "1e400", "true", "../x", "a/b", "é", "\x00", "16"]),
    st.text(max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _set(d: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    for seg in parents:
        if not isinstance(d.get(seg), dict):
            d[seg] = {}
        d = d[seg]
    d[last] = value


def _dump(cfg: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(cfg, allow_nan=True)
    return yaml.safe_dump(cfg, allow_unicode=True)


@settings(
    max_examples=90,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    mutations=st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=0, max_size=3),
    fmt=st.sampled_from(["yaml", "json"]),
    arms=st.sampled_from([None, "engine", "x", "engine,x", "nope", ",", "paged"]),
    seed=st.sampled_from([None, "-1", "0", "7", "99999999999999999999999", "x"]),
)
def test_generated_configs_end_cleanly(mutations, fmt, arms, seed):
    cfg = copy.deepcopy(TINY)
    for path, value in mutations:
        _set(cfg, path, value)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = root / f"cfg.{fmt}"
        try:
            config.write_text(_dump(cfg, fmt), encoding="utf-8")
        except (UnicodeEncodeError, yaml.YAMLError, ValueError):
            return  # not representable in the format: nothing to feed the CLI
        user = make_user_files(root)  # the config is a user file too: never rewritten
        argv = ["run", "--config", str(config), "--out", str(root / "out"), "--quiet"]
        argv += ["--no-report", "--duration", "1"]
        argv += ["--arms", arms] if arms else []
        argv += ["--seed", seed] if seed else []
        code, err = check_case(argv, root, user=user)
        if code == 0:
            assert (root / "out" / "summary.json").is_file()
            assert (root / "out" / ".kvsched-run").is_file()
        else:
            assert not (root / "out").exists(), err
