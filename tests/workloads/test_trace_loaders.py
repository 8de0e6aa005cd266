"""Trace loaders on small fixture files: exact parsing, and every kind of bad row named precisely."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.config import ConfigError
from workloads.trace_loaders import detect_format, load_trace


def write_jsonl(tmp_path, rows, name="t.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def write_csv(tmp_path, lines, name="t.csv") -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def mc(t, n_in, n_out, ids):
    return {"timestamp": t, "input_length": n_in, "output_length": n_out, "hash_ids": ids}


GOOD_MOONCAKE = [mc(0, 600, 5, [0, 1]), mc(1500, 512, 7, [0]), mc(1500, 1100, 3, [0, 1, 2])]


def test_mooncake_rows_parse_exactly(tmp_path):
    trace = load_trace(write_jsonl(tmp_path, GOOD_MOONCAKE), "mooncake")
    assert len(trace) == 3 and trace.block_size == 512
    assert trace.arrival_s.tolist() == [0.0, 1.5, 1.5]  # ms -> s
    assert trace.input_length.tolist() == [600, 512, 1100]
    assert trace.output_length.tolist() == [5, 7, 3]
    assert trace.request_id.tolist() == [0, 1, 2]
    assert [trace.blocks(i).tolist() for i in range(3)] == [[0, 1], [0], [0, 1, 2]]


@pytest.mark.parametrize(
    "row, line_field",
    [
        ({"timestamp": 3000, "output_length": 5, "hash_ids": [3]}, "input_length: Field required"),
        (mc(3000, -4, 5, []), "input_length: Input should be greater than 0"),
        (mc(3000, 10, -1, [3]), "output_length: Input should be greater than 0"),
        (mc(3000, 10, 0, [3]), "output_length: Input should be greater than 0"),
        (mc(1000, 10, 5, [3]), "timestamp: arrival goes back in time"),
        (
            mc(3000, 1025, 5, [3, 4]),
            "hash_ids: has 2 ids but input_length 1025 needs ceil(1025/512) = 3",
        ),
        (
            mc(3000, 512, 5, [3, 4]),
            "hash_ids: has 2 ids but input_length 512 needs ceil(512/512) = 1",
        ),
        (mc(3000, 512, 5, [-3]), "hash_ids.0: Input should be greater than or equal to 0"),
        (mc(3000, "512", 5, [3]), "input_length: Input should be a valid integer"),
        ("{not json", "row: Invalid JSON"),
    ],
)
def test_mooncake_bad_row_names_file_line_and_field(tmp_path, row, line_field):
    path = write_jsonl(tmp_path, [*GOOD_MOONCAKE, row])
    with pytest.raises(ConfigError) as err:
        load_trace(path, "mooncake")
    assert str(err.value).startswith(f"{path}:4: {line_field}")


def test_skip_bad_rows_skips_and_counts(tmp_path):
    rows = [
        GOOD_MOONCAKE[0],
        mc(0, -1, 5, []),
        GOOD_MOONCAKE[1],
        mc(100, 512, 5, [9]),
        GOOD_MOONCAKE[2],
    ]
    trace = load_trace(write_jsonl(tmp_path, rows), "mooncake", skip_bad_rows=True)
    assert len(trace) == 3 and trace.num_skipped == 2
    assert trace.input_length.tolist() == [600, 512, 1100]
    assert (
        ":2: input_length" in trace.skipped_errors[0] and ":4: timestamp" in trace.skipped_errors[1]
    )


def test_blank_lines_are_ignored_and_all_bad_is_an_error(tmp_path):
    path = write_jsonl(tmp_path, [json.dumps(GOOD_MOONCAKE[0]), "", "  "])
    assert len(load_trace(path, "mooncake")) == 1
    with pytest.raises(ConfigError, match="no valid rows \\(1 skipped\\)"):
        load_trace(write_jsonl(tmp_path, [mc(0, 0, 1, [])]), "mooncake", skip_bad_rows=True)


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def test_azure_rows_parse_exactly(tmp_path):
    path = write_csv(
        tmp_path,
        [
            AZURE_HEADER,
            "2023-11-16 18:17:03.9799600,4808,10",
            "2023-11-16 18:17:04.0319600,3180,8",
            "2023-11-17 00:00:00.0000000,5,1",
        ],
    )
    trace = load_trace(path, "azure")
    assert not trace.has_content
    assert trace.input_length.tolist() == [4808, 3180, 5] and trace.output_length.tolist() == [
        10,
        8,
        1,
    ]
    # Exact to the 7th fraction digit, rebased to the first row, across midnight.
    assert trace.arrival_s.tolist() == [0.0, 0.052, 20576.02004]
    assert trace.prompt(0) is None


@pytest.mark.parametrize(
    "line, message",
    [
        ("2023-11-16 18:17:05.0,,3", ":3: ContextTokens: Input should be a valid integer"),
        ("2023-11-16 18:17:05.0,-7,3", ":3: ContextTokens: Input should be greater than 0"),
        ("2023-11-16 18:17:05.0,7,-3", ":3: GeneratedTokens: Input should be greater than 0"),
        ("2023-11-16 18:17:01.0,7,3", ":3: TIMESTAMP: arrival goes back in time"),
        ("yesterday,7,3", ":3: TIMESTAMP: 'yesterday' is not 'YYYY-MM-DD HH:MM:SS.fffffff'"),
        (
            "2023-13-16 18:17:05.0,7,3",
            ":3: TIMESTAMP: '2023-13-16 18:17:05.0': month must be in 1..12",
        ),
        ("2023-11-16 18:17:05.0,7", ":3: GeneratedTokens: Input should be a valid integer"),
    ],
)
def test_azure_bad_rows(tmp_path, line, message):
    path = write_csv(tmp_path, [AZURE_HEADER, "2023-11-16 18:17:03.0,4808,10", line])
    with pytest.raises(ConfigError) as err:
        load_trace(path, "azure")
    assert str(err.value).startswith(path + message)


def test_azure_missing_column_is_named(tmp_path):
    path = write_csv(tmp_path, ["TIMESTAMP,ContextTokens", "2023-11-16 18:17:03.0,4808"])
    with pytest.raises(ConfigError, match=":1: header: missing column\\(s\\) GeneratedTokens"):
        load_trace(path, "azure")


def test_generic_jsonl_both_prompt_forms(tmp_path):
    rows = [
        {
            "arrival_s": 0.0,
            "prompt_tokens": [5, 6, 7],
            "output_tokens": 2,
            "session_id": 4,
            "priority": 1,
        },
        {
            "request_id": 9,
            "arrival_s": 0.5,
            "block_ids": [1, 2],
            "block_size": 4,
            "input_length": 6,
            "output_tokens": 3,
        },
    ]
    trace = load_trace(write_jsonl(tmp_path, rows), "jsonl")
    assert trace.request_id.tolist() == [0, 9] and trace.session_id.tolist() == [4, -1]
    assert trace.priority.tolist() == [1, 0] and trace.input_length.tolist() == [3, 6]
    assert trace.prompt(0).tolist() == [5, 6, 7] and trace.block_size == 4
    assert trace.prompt(1).shape == (6,)


@pytest.mark.parametrize(
    "row, message",
    [
        (
            {"arrival_s": 1, "output_tokens": 2},
            "prompt_tokens: give either prompt_tokens or block_ids",
        ),
        (
            {"arrival_s": 1, "prompt_tokens": [1], "block_ids": [1], "output_tokens": 2},
            "prompt_tokens: give either",
        ),
        (
            {"arrival_s": 1, "prompt_tokens": [], "output_tokens": 2},
            "prompt_tokens: must not be empty",
        ),
        (
            {"arrival_s": 1, "prompt_tokens": [1, 2], "input_length": 3, "output_tokens": 2},
            "input_length: 3 != len",
        ),
        (
            {"arrival_s": 1, "block_ids": [1], "input_length": 3, "output_tokens": 2},
            "block_size: required",
        ),
        (
            {
                "arrival_s": 1,
                "block_ids": [1],
                "block_size": 8,
                "input_length": 3,
                "output_tokens": 2,
            },
            "block_size: 8 differs from 4 earlier in the file",
        ),
        (
            {
                "arrival_s": 1,
                "block_ids": [1],
                "block_size": 4,
                "input_length": 9,
                "output_tokens": 2,
            },
            "block_ids: has 1 ids but input_length 9 needs ceil(9/4) = 3",
        ),
        (
            {"arrival_s": 1, "prompt_tokens": [1], "output_tokens": 2, "request_id": 0},
            "request_id: 0 already used at line 1",
        ),
        (
            {"arrival_s": 0.1, "prompt_tokens": [1], "output_tokens": 2},
            "arrival_s: arrival goes back in time",
        ),
        (
            {"arrival_s": 1, "prompt_tokens": [1], "output_tokens": 2, "colour": 3},
            "colour: Extra inputs are not permitted",
        ),
        ({"arrival_s": 1, "prompt_tokens": [1]}, "output_tokens: Field required"),
    ],
)
def test_generic_jsonl_bad_rows(tmp_path, row, message):
    first = {
        "arrival_s": 0.5,
        "block_ids": [7],
        "block_size": 4,
        "input_length": 3,
        "output_tokens": 1,
    }
    path = write_jsonl(tmp_path, [first, row])
    with pytest.raises(ConfigError) as err:
        load_trace(path, "jsonl")
    assert str(err.value).startswith(f"{path}:2: {message}")


def test_missing_file_unknown_format_and_detection(tmp_path):
    with pytest.raises(ConfigError, match="path: no such trace file"):
        load_trace(tmp_path / "nope.jsonl", "mooncake")
    with pytest.raises(ConfigError, match="format: unknown trace format 'parquet'"):
        load_trace(write_jsonl(tmp_path, GOOD_MOONCAKE), "parquet")
    assert detect_format(write_jsonl(tmp_path, GOOD_MOONCAKE)) == "mooncake"
    assert detect_format(write_jsonl(tmp_path, [{"arrival_s": 0}], name="g.jsonl")) == "jsonl"
    assert detect_format(tmp_path / "x.csv") == "azure"


def test_columns_are_read_only(tmp_path):
    trace = load_trace(write_jsonl(tmp_path, GOOD_MOONCAKE), "mooncake")
    with pytest.raises(ValueError):
        trace.input_length[0] = 1
    assert trace.block_ids.dtype == np.int64 and trace.block_start.tolist() == [0, 2, 3, 6]
