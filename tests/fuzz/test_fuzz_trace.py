"""Hypothesis-generated traces (our JSONL, Mooncake, Azure CSV) through `kvsched trace stats`
and `kvsched run`: exit 0 or 2, never a traceback, no user file lost, nothing partial."""

from __future__ import annotations

import copy
import csv
import io
import json
import tempfile
from pathlib import Path

import yaml
from fuzz_harness import TINY, check_case, make_user_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NUMBERS = st.one_of(
    st.integers(min_value=-5, max_value=300),
    st.sampled_from([0, 1, 2**31, 2**63, 10**23, 1e23, float("inf"), float("nan"), -0.0, 0.5]),
    st.floats(min_value=0, max_value=100),
)
IDS = st.one_of(
    st.none(),
    st.integers(min_value=0, max_value=50),
    st.sampled_from(["req-1", "req-2", "", "é", 10**23, 1e23, True, -1, "1", 1]),
    st.text(max_size=6),
)
JSONL_ROW = st.fixed_dictionaries(
    {
        "arrival_s": NUMBERS,
        "output_tokens": NUMBERS,
    },
    optional={
        "request_id": IDS,
        "prompt_tokens": st.lists(st.integers(min_value=-2, max_value=2**31), max_size=40),
        "block_ids": st.lists(st.integers(min_value=-1, max_value=9), max_size=4),
        "block_size": NUMBERS,
        "input_length": NUMBERS,
        "session_id": st.integers(min_value=-2, max_value=3),
        "priority": st.one_of(st.integers(-2, 2), st.booleans()),
        "extra": st.text(max_size=3),
    },
)
MOONCAKE_ROW = st.fixed_dictionaries(
    {
        "timestamp": NUMBERS,
        "input_length": NUMBERS,
        "output_length": NUMBERS,
        "hash_ids": st.lists(st.integers(min_value=-1, max_value=5), max_size=3),
    }
)
AZURE_ROW = st.tuples(
    st.sampled_from(
        [
            "2023-11-16 18:15:46.6805900",
            "2023-11-16 18:15:47.0000000",
            "2023-11-16 18:15:45.1",
            "2023-02-30 00:00:00",
            "nan",
            "",
        ]
    ),
    st.one_of(st.integers(-1, 300), st.sampled_from(["x", "1e3", "nan", "inf", ""])),
    st.one_of(st.integers(-1, 20), st.sampled_from(["x", "", "2.0"])),
)
# Rows that are valid on their own, mixed in so that many cases reach a simulation.
VALID_JSONL_ROW = st.fixed_dictionaries(
    {
        "arrival_s": st.floats(min_value=0, max_value=5),
        "output_tokens": st.integers(min_value=1, max_value=8),
        "prompt_tokens": st.lists(st.integers(0, 1000), min_size=1, max_size=32),
    },
    optional={"request_id": IDS},
)
VALID_MOONCAKE_ROW = st.integers(min_value=1, max_value=1500).flatmap(
    lambda n: st.fixed_dictionaries(
        {
            "timestamp": st.floats(min_value=0, max_value=5000),
            "input_length": st.just(n),
            "output_length": st.integers(min_value=1, max_value=8),
            "hash_ids": st.lists(st.integers(0, 9), min_size=-(-n // 512), max_size=-(-n // 512)),
        }
    )
)
VALID_AZURE_ROW = st.tuples(
    st.sampled_from(["2023-11-16 18:15:46.6805900", "2023-11-16 18:15:47.0000000"]),
    st.integers(min_value=1, max_value=300),
    st.integers(min_value=1, max_value=8),
)
GARBAGE = st.sampled_from(["{", "null", "[]", '{"a": 1}', "\x00\x01", "Infinity", "   "])


def _jsonl(rows: list, garbage: list[str]) -> str:
    lines = [json.dumps(r, allow_nan=True) for r in rows] + garbage
    return "\n".join(lines) + "\n"


def _azure(rows: list, bom: bool) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
    w.writerows(rows)
    return ("\ufeff" if bom else "") + buf.getvalue()


def _check_trace(text: str, name: str, fmt: str, run: bool, skip: bool) -> None:
    """skip: bad rows are skipped and counted, so most cases reach a simulation."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        trace = root / name
        trace.write_text(text, encoding="utf-8")
        cfg = copy.deepcopy(TINY)
        params = {"path": str(trace), "format": fmt, "skip_bad_rows": skip}
        cfg["workload"] = {"name": "trace", "params": params}
        (root / "cfg.yaml").write_text(yaml.safe_dump(cfg))
        user = make_user_files(root)
        stats = ["trace", "stats", str(trace), "--format", fmt] + (
            ["--skip-bad-rows"] if skip else []
        )
        check_case(stats, root, user=user)
        check_case(["trace", "stats", str(trace), "--json"], root, user=user)
        if run:
            argv = ["run", "--config", "cfg.yaml", "--out", "out", "--quiet", "--no-report"]
            check_case(argv, root, user=user)


SETTINGS = settings(
    max_examples=45,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(
    rows=st.lists(st.one_of(VALID_JSONL_ROW, JSONL_ROW), max_size=5),
    garbage=st.lists(GARBAGE, max_size=1),
    run=st.booleans(),
    skip=st.booleans(),
)
def test_generated_jsonl_traces(rows, garbage, run, skip):
    _check_trace(_jsonl(rows, garbage), "t.jsonl", "jsonl", run, skip)


@SETTINGS
@given(
    rows=st.lists(st.one_of(VALID_MOONCAKE_ROW, MOONCAKE_ROW), max_size=4),
    run=st.booleans(),
    skip=st.booleans(),
)
def test_generated_mooncake_traces(rows, run, skip):
    _check_trace(_jsonl(rows, []), "m.jsonl", "mooncake", run, skip)


@SETTINGS
@given(
    rows=st.lists(st.one_of(VALID_AZURE_ROW, AZURE_ROW), max_size=4),
    bom=st.booleans(),
    run=st.booleans(),
    skip=st.booleans(),
)
def test_generated_azure_traces(rows, bom, run, skip):
    _check_trace(_azure(rows, bom), "a.csv", "azure", run, skip)
