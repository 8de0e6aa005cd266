"""Trace replay: token prefixes from block ids, replay options, the Azure prefix rule, bad params."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.config import ConfigError
from sim.kv.hashing import page_keys
from workloads import make_workload, trace_data
from workloads.tokens import block_tokens, keyed_tokens
from workloads.trace import replay_times


def mooncake_file(tmp_path, rows) -> str:
    path = tmp_path / "mc.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                dict(
                    zip(("timestamp", "input_length", "output_length", "hash_ids"), r, strict=True)
                )
            )
            + "\n"
            for r in rows
        )
    )
    return str(path)


ROWS = [
    (0, 1100, 5, [0, 1, 2]),
    (1000, 700, 6, [0, 1]),
    (2000, 1024, 7, [0, 3]),
    (4000, 300, 8, [4]),
]


def load(path, rng_seed=0, **params):
    w = make_workload(
        "trace", {"path": path, "format": "mooncake", **params}, np.random.default_rng(rng_seed)
    )
    return w, list(w.requests)


def test_shared_hash_prefix_gives_identical_tokens(tmp_path):
    _, reqs = load(mooncake_file(tmp_path, ROWS))
    a, b, c, d = (r.prompt for r in reqs)
    assert [r.prompt_tokens for r in reqs] == [1100, 700, 1024, 300]
    assert np.array_equal(a[:700], b)  # b = blocks [0, 1 partial]: a prefix of a's blocks 0, 1
    assert np.array_equal(a[:512], c[:512]) and not np.array_equal(a[512:1024], c[512:1024])
    assert np.array_equal(
        a[1024:], keyed_tokens(2, 76)
    )  # the partial last block: input_length governs
    assert not np.array_equal(d, a[:300])
    for page_size in (1, 16, 64, 512):  # shared blocks give shared page keys at every page size
        ka, kc = page_keys(a, page_size), page_keys(c, page_size)
        shared = 512 // page_size
        assert np.array_equal(ka[:shared], kc[:shared]) and ka[shared] != kc[shared]


def test_open_loop_replay_honours_timestamps_and_metadata(tmp_path):
    w, reqs = load(mooncake_file(tmp_path, ROWS))
    assert w.num_clients is None and w.info["records"] == 4
    assert [r.arrival_s for r in reqs] == [0.0, 1.0, 2.0, 4.0]
    assert [r.output_tokens for r in reqs] == [5, 6, 7, 8]
    assert [r.request_id for r in reqs] == [0, 1, 2, 3] and {r.tag for r in reqs} == {"mooncake"}


@pytest.mark.parametrize(
    "params, ids, arrivals",
    [
        ({"time_scale": 2.0}, [0, 1, 2, 3], [0.0, 0.5, 1.0, 2.0]),
        (
            {"rate": 2.0},
            [0, 1, 2, 3],
            [0.0, 0.375, 0.75, 1.5],
        ),  # 3 gaps in 4 s = 0.75 req/s -> 2 req/s
        ({"start_s": 1.0, "end_s": 4.0}, [1, 2], [0.0, 1.0]),
        ({"start_s": 1.0, "max_requests": 2, "time_scale": 0.5}, [1, 2], [0.0, 2.0]),
        ({"num_clients": 3}, [0, 1, 2, 3], [None, None, None, None]),
    ],
)
def test_replay_options(tmp_path, params, ids, arrivals):
    w, reqs = load(mooncake_file(tmp_path, ROWS), **params)
    assert [r.request_id for r in reqs] == ids
    if arrivals[0] is None:
        assert all(r.arrival_s is None for r in reqs)
    else:
        assert [r.arrival_s for r in reqs] == pytest.approx(arrivals)
    assert w.num_clients == params.get("num_clients")


@pytest.mark.parametrize(
    "params, message",
    [
        ({"rate": 2.0, "time_scale": 2.0}, "give rate or time_scale, not both"),
        ({"num_clients": 4, "rate": 1.0}, "num_clients replays closed loop"),
        ({"start_s": 5.0, "end_s": 2.0}, "end_s (2.0) must be after start_s (5.0)"),
        ({"time_scale": 0}, "workload.params.time_scale: Input should be greater than 0"),
        ({"shared_prefix_tokens": 64}, "shared_prefix_* apply to format azure only"),
        ({"start_s": 100.0}, "no rows of"),
        ({"speed": 2}, "workload.params.speed: Extra inputs are not permitted"),
    ],
)
def test_bad_replay_params_raise_config_error(tmp_path, params, message):
    with pytest.raises(ConfigError) as err:
        load(mooncake_file(tmp_path, ROWS), **params)
    assert message in str(err.value)


def test_missing_trace_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="^path: no such trace file"):
        load(str(tmp_path / "absent.jsonl"))


def azure_file(tmp_path, n=200) -> str:
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [
        f"2023-11-16 18:00:{i // 10:02d}.{i % 10}000000,{100 + i},{1 + i % 7}" for i in range(n)
    ]
    path = tmp_path / "az.csv"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_azure_synthetic_prefix_rule(tmp_path):
    params = {
        "path": azure_file(tmp_path),
        "format": "azure",
        "shared_prefix_tokens": 150,
        "shared_prefix_share": 0.5,
        "num_shared_prefixes": 2,
    }
    reqs = list(make_workload("trace", params, np.random.default_rng(3)).requests)
    rng = np.random.default_rng(3)  # the documented rule, replayed by hand
    shared = rng.random(200) < 0.5
    which = rng.integers(0, 2, size=200)
    prefixes = [keyed_tokens(k, 150, 0x5EED) for k in range(2)]
    for i, r in enumerate(reqs):
        assert r.prompt_tokens == 100 + i and r.tag == ("azure-shared" if shared[i] else "azure")
        if shared[i]:
            head = min(150, r.prompt_tokens - 1)
            assert np.array_equal(r.prompt[:head], prefixes[which[i]][:head])
    assert 80 < shared.sum() < 120
    again = list(make_workload("trace", params, np.random.default_rng(3)).requests)
    assert all(np.array_equal(x.prompt, y.prompt) for x, y in zip(reqs, again, strict=True))


def test_azure_without_prefix_shares_nothing(tmp_path):
    reqs = list(
        make_workload(
            "trace", {"path": azure_file(tmp_path, 20), "format": "azure"}, np.random.default_rng(0)
        ).requests
    )
    keys = [set(page_keys(r.prompt, 16).tolist()) for r in reqs]
    assert all(not (keys[i] & keys[j]) for i in range(20) for j in range(i))


def test_prompts_are_built_lazily(tmp_path, monkeypatch):
    built = []
    original = trace_data.blocks_prompt
    monkeypatch.setattr(trace_data, "blocks_prompt", lambda *a: built.append(a[1]) or original(*a))
    w = make_workload(
        "trace",
        {"path": mooncake_file(tmp_path, ROWS), "format": "mooncake"},
        np.random.default_rng(0),
    )
    assert built == []  # loading keeps block ids only
    assert next(w.requests).prompt_tokens == 1100 and built == [1100]
    assert next(w.requests).prompt_tokens == 700 and built == [1100, 700]


@settings(max_examples=40, deadline=None)
@given(
    keys=st.lists(st.integers(0, 2**40), min_size=1, max_size=6),
    n=st.integers(1, 64),
    cut=st.integers(0, 64),
    salt=st.integers(0, 5),
)
def test_block_tokens_depend_only_on_key_salt_and_position(keys, n, cut, salt):
    full = block_tokens(np.array(keys), n, salt)
    short = block_tokens(np.array(keys), min(cut, n), salt)
    assert np.array_equal(
        full[:, : short.shape[1]], short
    )  # a partial block is a prefix of the full one
    for i, key in enumerate(keys):
        assert np.array_equal(full[i], keyed_tokens(key, n, salt))
    assert full.dtype == np.int32 and full.min() >= 0 and full.max() < 128256


@settings(max_examples=40, deadline=None)
@given(gaps=st.lists(st.floats(0, 100), min_size=2, max_size=30), rate=st.floats(0.1, 50))
@example(gaps=[0.0, 2.2250738585e-313], rate=1.0)  # a subnormal span once overflowed to inf
def test_rate_override_gives_the_requested_mean_rate(gaps, rate):
    t = np.cumsum([0.0, *gaps])
    out = replay_times(t, rate=rate)
    assert np.all(np.diff(out) >= 0)
    if t[-1] > 0:
        assert (t.size - 1) / (out[-1] - out[0]) == pytest.approx(rate, rel=1e-9)
