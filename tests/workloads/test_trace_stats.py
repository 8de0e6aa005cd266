"""`trace stats`: exact hit rates on hand-built traces, the CLI, and the real traces when present."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched.cli import main
from workloads.trace_data import TraceBuilder
from workloads.trace_loaders import load_trace
from workloads.trace_stats import (
    infinite_cache_hits,
    lru_hits,
    prefix_chains,
    timing_stats,
    trace_stats,
)

# block_size 4: (arrival_s, input_length, block ids). Worked by hand in the test below.
BLOCK_ROWS = [
    (0.0, 8, [1, 2]),
    (1.0, 10, [1, 2, 3]),
    (2.0, 12, [1, 2, 3]),
    (4.0, 8, [5, 2]),
    (4.0, 8, [1, 2]),
]


def block_file(tmp_path) -> str:
    path = tmp_path / "blocks.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "arrival_s": t,
                    "block_ids": ids,
                    "block_size": 4,
                    "input_length": n,
                    "output_tokens": 1,
                }
            )
            + "\n"
            for t, n, ids in BLOCK_ROWS
        )
    )
    return str(path)


def test_infinite_and_lru_hit_rates_exact(tmp_path):
    chains = prefix_chains(load_trace(block_file(tmp_path), "jsonl"))
    assert (
        chains.num_nodes == 5
    )  # (1), (1,2), (1,2,3), (5), (5,2): block 2 after 5 is another prefix
    # Hits per request: 0; 8 (blocks 1, 2); 8 + 2 (block 3 was seen with 2 tokens only); 0;
    # 8 capped at 7 (one prompt token is always computed). Blocks fully hit: 0, 2, 2, 0, 2 of 12.
    assert infinite_cache_hits(chains) == (25 / 46, 6 / 12)
    # An 8-token LRU keeps (1,2) through requests 1-2, then request 3's blocks push it out.
    assert lru_hits(chains, 8) == (16 / 46, 4 / 12)
    assert lru_hits(chains, 1000) == infinite_cache_hits(chains)


def test_token_rows_are_chunked(tmp_path):
    path = tmp_path / "tok.jsonl"
    rows = [
        {"arrival_s": 0, "prompt_tokens": [1, 2, 3, 4, 5], "output_tokens": 1},
        {"arrival_s": 1, "prompt_tokens": [1, 2, 3, 4, 9], "output_tokens": 1},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stats = trace_stats(load_trace(path, "jsonl"), capacities=[2], chunk_tokens=2)
    assert stats["block_tokens"] == 2 and stats["total_blocks"] == 6 and stats["unique_blocks"] == 4
    assert (
        stats["infinite_cache_token_hit_rate"] == 4 / 10
        and stats["infinite_cache_block_hit_rate"] == 2 / 6
    )
    # A 2-token LRU keeps only the head chunk [1, 2] (touched last, evicted last): 2 of 10 tokens.
    assert stats["lru_token_hit_rate"] == {"2": 2 / 10}


def test_timing_stats_exact():
    s = timing_stats(np.array([0.0, 1.0, 1.0, 3.0, 130.0]))
    assert (
        s["span_s"] == 130.0 and s["mean_rate_per_s"] == 4 / 130 and s["distinct_timestamps"] == 4
    )
    gaps = np.array([1.0, 0.0, 2.0, 127.0])
    assert s["interarrival_cv"] == pytest.approx(gaps.std() / gaps.mean())
    assert s["peak_minute_over_mean"] == 4 / (5 / 3)  # minutes 0, 1, 2 hold 4, 0, 1 requests


@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=5), min_size=1, max_size=12),
    caps=st.lists(st.integers(1, 60), min_size=2, max_size=2),
)
def test_lru_never_beats_infinite_and_grows_with_capacity(rows, caps):
    b = TraceBuilder("h", "jsonl")
    b.block_size = 4
    for i, ids in enumerate(rows):
        b.add(float(i), 4 * len(ids), 1, request_id=i, blocks=ids)
    chains = prefix_chains(b.build())
    small, large = sorted(caps)
    inf_tok, inf_blk = infinite_cache_hits(chains)
    lo, hi = lru_hits(chains, small), lru_hits(chains, large)
    assert lo[0] <= hi[0] <= inf_tok and lo[1] <= hi[1] <= inf_blk


def run_cli(capsys, *argv):
    rc = main(["trace", "stats", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_json(capsys, tmp_path):
    rc, out, _ = run_cli(capsys, block_file(tmp_path), "--json", "--capacities", "8,1e3")
    stats = json.loads(out)
    assert rc == 0 and stats["records"] == 5 and stats["format"] == "jsonl"
    assert stats["infinite_cache_token_hit_rate"] == 25 / 46
    assert stats["lru_token_hit_rate"] == {"8": 16 / 46, "1000": 25 / 46}
    assert stats["input_tokens"]["max"] == 12 and stats["span_s"] == 4.0


def test_cli_window_and_text(capsys, tmp_path):
    rc, out, _ = run_cli(
        capsys, block_file(tmp_path), "--start-s", "1", "--max-requests", "2", "--json"
    )
    assert rc == 0 and json.loads(out)["records"] == 2
    rc, out, _ = run_cli(capsys, block_file(tmp_path), "--capacities", "8")
    assert rc == 0 and "infinite cache" in out and "54.3% of tokens, 50.0% of blocks" in out
    assert "LRU 8 tokens" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--capacities", "abc"], "--capacities: 'abc' is not a comma-separated list"),
        (["--capacities", "0"], "--capacities: '0': give one or more positive token counts"),
        (["--end-s", "0"], "--end-s: must be after --start-s"),
        (["--format", "parquet"], "argument --format: invalid choice"),
    ],
)
def test_cli_bad_arguments_exit_2_with_one_line(capsys, tmp_path, argv, message):
    rc, out, err = run_cli(capsys, block_file(tmp_path), *argv)
    assert rc == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_cli_bad_row_and_skip(capsys, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n'
        '{"timestamp": 9, "input_length": 5, "output_length": 1}\n'
    )
    rc, out, err = run_cli(capsys, path)
    assert rc == 2 and out == "" and f"{path}:2: hash_ids: Field required" in err
    rc, out, _ = run_cli(capsys, path, "--skip-bad-rows", "--json")
    assert rc == 0 and json.loads(out)["skipped_rows"] == 1


TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"


@pytest.mark.skipif(not TRACES.is_dir(), reason="the shared traces folder is absent")
def test_real_conversation_trace_matches_its_readme():
    stats = trace_stats(
        load_trace(TRACES / "mooncake_fast25" / "conversation_trace.jsonl", "mooncake"),
        capacities=[1e6],
    )
    assert stats["records"] == 12031 and stats["distinct_timestamps"] == 1180
    assert stats["total_blocks"] == 288500 and stats["unique_blocks"] == 182790
    # Every repeated id sits in the leading run of seen ids, so block hits = repeats.
    assert stats["infinite_cache_block_hit_rate"] == 1 - 182790 / 288500
    assert stats["input_tokens"]["p50"] == 6909 and stats["output_tokens"]["max"] == 2000
