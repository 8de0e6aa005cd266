"""`kvsched timeline`: every event valid trace-event JSON; exact contents on a hand-written run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvsched.cli import main
from reports.timeline import build_trace, write_timeline
from reports.timeline_data import STEP_COLUMNS, assign_lanes, load_timeline
from sim.rundir import arm_dir_name
from tests.reports.conftest import make_run, tiny_config

METADATA = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def check_trace_format(trace: dict) -> None:
    """The trace-event format as Perfetto and chrome://tracing read it."""
    assert json.loads(json.dumps(trace)) == trace  # plain JSON, no NaN
    events = trace["traceEvents"]
    for e in events:
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert isinstance(e["name"], str) and e["name"], e
        if e["ph"] == "M":
            assert e["name"] in METADATA and isinstance(e["args"], dict), e
            continue
        assert isinstance(e["ts"], int | float) and e["ts"] >= 0, e
        assert isinstance(e.get("args", {}), dict), e
        if e["ph"] == "X":
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0, e
        elif e["ph"] == "i":
            assert e["s"] in ("g", "p", "t"), e
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, int | float) for v in e["args"].values()), e
        else:
            raise AssertionError(f"unexpected phase {e['ph']!r}")
    # Complete slices on one thread must nest (a child inside its parent), never cross.
    by_thread: dict[tuple, list] = {}
    for e in events:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], -e["dur"]))
    for key, spans in by_thread.items():
        stack: list[float] = []
        for ts, neg_dur in sorted(spans):
            while stack and stack[-1] <= ts:
                stack.pop()
            end = round(ts - neg_dur, 3)
            assert not stack or end <= stack[-1], (key, ts, end, stack[-1])
            stack.append(end)


def _csv(path: Path, text: str) -> None:
    path.write_text("\n".join(line.strip() for line in text.strip().splitlines()) + "\n")


@pytest.fixture()
def hand_run(tmp_path) -> Path:
    """2 nodes, 4 requests (one never placed), 3 steps on node 0 and one with a preemption on 1."""
    run = tmp_path / "hand"
    d = run / arm_dir_name("engine")
    d.mkdir(parents=True)
    (run / "summary.json").write_text(
        json.dumps({"name": "hand", "arms": {"engine": {"duration_s": 1.0}}})
    )
    _csv(
        d / "requests.csv",
        """request_id,node,tag,arrival_s,routed_s,first_token_s,finish_s,prompt_tokens,cached_tokens,output_tokens,preemptions,status
        0,0,a,0.0,0.001,0.1,0.3,100,0,3,0,finished
        1,0,a,0.02,0.021,0.15,0.25,40,32,2,0,finished
        2,1,b,0.05,0.051,0.2,,50,16,2,1,unfinished
        3,-1,c,0.5,,,,99999,0,0,0,failed""",
    )
    _csv(
        d / "timeseries.csv",
        """time_s,node,kv_capacity_bytes,kv_allocated_bytes,kv_cached_bytes,kv_retired_bytes,waiting,running,evicted_pages
        0.0,0,4000000000,0,0,0,0,0,0
        0.0,1,4000000000,0,0,0,0,0,0
        0.5,0,4000000000,1000000000,500000000,0,1,2,0
        0.5,1,4000000000,2000000000,0,0,0,1,7""",
    )
    _csv(
        d / "steps.csv",
        f"""{",".join(STEP_COLUMNS)}
        0,0,0.001,0.099,1,100,0,0,0,1,0
        0,1,0.1,0.05,1,40,1,101,32,2,0
        0,2,0.15,0.1,0,0,2,283,0,2,0
        1,0,0.051,0.149,1,50,0,0,16,1,1""",
    )
    return run


def _body(trace: dict) -> list[tuple]:
    return [
        (e["ph"], e["name"], e["pid"], e["tid"], e["ts"], e.get("dur"))
        for e in trace["traceEvents"]
        if e["ph"] != "M"
    ]


def test_hand_run_exact_events(hand_run):
    trace = build_trace(load_timeline(hand_run))
    check_trace_format(trace)
    body = _body(trace)
    expected = [
        # steps on node 0 (pid 1) and node 1 (pid 2), tid 0
        ("X", "prefill", 1, 0, 1000.0, 99000.0),
        ("X", "prefill+decode", 1, 0, 100000.0, 50000.0),
        ("X", "decode", 1, 0, 150000.0, 100000.0),
        ("X", "prefill", 2, 0, 51000.0, 149000.0),
        # the preemption of node 1's step (no events.csv: the steps.csv count, at the step start)
        ("i", "preempt", 2, 1, 51000.0, None),
        # router decisions (pid 0) and the request that was never placed
        ("i", "route", 0, 0, 1000.0, None),
        ("i", "route", 0, 0, 21000.0, None),
        ("i", "route", 0, 0, 51000.0, None),
        ("i", "failed", 0, 0, 500000.0, None),
        # request 0 on lane 0 of node 0, request 1 overlaps it: lane 1; request 2 on node 1
        ("X", "request 0", 1, 10, 0.0, 300000.0),
        ("X", "routing", 1, 10, 0.0, 1000.0),
        ("X", "queued+prefill", 1, 10, 1000.0, 99000.0),
        ("X", "decode", 1, 10, 100000.0, 200000.0),
        ("X", "request 1", 1, 11, 20000.0, 230000.0),
        ("X", "routing", 1, 11, 20000.0, 1000.0),
        ("X", "queued+prefill", 1, 11, 21000.0, 129000.0),
        ("X", "decode", 1, 11, 150000.0, 100000.0),
        ("X", "request 2", 2, 10, 50000.0, 950000.0),  # still running: ends at the window's end
        ("X", "routing", 2, 10, 50000.0, 1000.0),
        ("X", "queued+prefill", 2, 10, 51000.0, 149000.0),
        ("X", "decode", 2, 10, 200000.0, 800000.0),
        # evictions from the evicted_pages counter, KV and queue counters per sample
        ("i", "evict", 2, 1, 500000.0, None),
        ("C", "KV memory (GB)", 1, 0, 0.0, None),
        ("C", "queue (requests)", 1, 0, 0.0, None),
        ("C", "KV memory (GB)", 2, 0, 0.0, None),
        ("C", "queue (requests)", 2, 0, 0.0, None),
        ("C", "KV memory (GB)", 1, 0, 500000.0, None),
        ("C", "queue (requests)", 1, 0, 500000.0, None),
        ("C", "KV memory (GB)", 2, 0, 500000.0, None),
        ("C", "queue (requests)", 2, 0, 500000.0, None),
    ]
    assert sorted(body, key=str) == sorted(expected, key=str)
    assert [e[4] for e in body] == sorted(e[4] for e in body)  # written in time order
    by_key = {(e["ph"], e["name"], e["pid"], e.get("ts")): e for e in trace["traceEvents"]}
    assert by_key[("X", "prefill+decode", 1, 100000.0)]["args"] == {
        "step": 1,
        "num_prefill": 1,
        "prefill_tokens": 40,
        "num_decode": 1,
        "decode_ctx_sum": 101,
        "cached_tokens": 32,
        "batch_size": 2,
        "preempted": 0,
    }
    assert by_key[("X", "request 2", 2, 50000.0)]["args"] == {
        "request": 2,
        "tag": "b",
        "prompt_tokens": 50,
        "cached_tokens": 16,
        "output_tokens": 2,
        "preemptions": 1,
        "status": "unfinished",
    }
    assert by_key[("i", "route", 0, 21000.0)]["args"] == {"request": 1, "node": 0, "wait_ms": 1.0}
    assert by_key[("C", "KV memory (GB)", 1, 500000.0)]["args"] == {
        "used": 1.0,
        "cached": 0.5,
        "free": 2.5,
    }
    assert by_key[("C", "queue (requests)", 1, 500000.0)]["args"] == {"waiting": 1, "running": 2}
    assert by_key[("i", "evict", 2, 500000.0)]["args"] == {"pages_since_last_sample": 7}
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["name"] == "thread_name"
    }
    assert names[(1, 0)] == "steps" and names[(1, 11)] == "requests 1" and (2, 11) not in names
    procs = {
        e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"
    }
    assert procs == {0: "router", 1: "node 0", 2: "node 1"}


def test_events_and_transfers_files_replace_the_proxies(hand_run):
    d = hand_run / arm_dir_name("engine")
    events = "time_s,node,kind,request_id,value\n0.3,1,crash,-1,0\n0.2,0,preempt,1,40"
    _csv(d / "events.csv", events + "\n0.4,1,evict,-1,3")
    _csv(
        d / "transfers.csv",
        "start_s,end_s,src_node,dst_node,request_id,bytes,kind\n0.1,0.12,1,0,2,65536,read",
    )
    trace = build_trace(load_timeline(hand_run))
    check_trace_format(trace)
    body = _body(trace)
    assert ("i", "crash", 2, 1, 300000.0, None) in body
    assert ("i", "preempt", 1, 1, 200000.0, None) in body
    assert [e for e in body if e[1] in ("evict", "preempt")] == [
        ("i", "preempt", 1, 1, 200000.0, None),  # not the steps.csv count of node 1
        ("i", "evict", 2, 1, 400000.0, None),  # not the counter's 7 pages at 0.5 s
    ]
    assert ("X", "read -> node 0", 2, 2, 100000.0, 20000.0) in body


def test_window_clips_every_event(hand_run):
    trace = build_trace(load_timeline(hand_run, start_s=0.12, end_s=0.22))
    check_trace_format(trace)
    body = _body(trace)
    assert all(
        ts >= 120000.0 and ts + (dur or 0) <= 220000.0 + 1e-6 for _, _, _, _, ts, dur in body
    )
    assert ("X", "request 0", 1, 10, 120000.0, 100000.0) in body
    assert ("X", "prefill+decode", 1, 0, 120000.0, 30000.0) in body
    assert not [e for e in body if e[0] == "C"]  # no sample inside the window


def test_lanes_never_overlap_and_stay_few():
    rng = np.random.default_rng(0)
    starts = rng.uniform(0, 100, 500)
    spans = [(s, s + rng.uniform(0, 10)) for s in starts]
    lanes = assign_lanes(spans)
    for lane in set(lanes):
        mine = sorted(s for s, k in zip(spans, lanes, strict=True) if k == lane)
        assert all(a[1] <= b[0] for a, b in zip(mine, mine[1:], strict=False))
    peak = max(sum(a <= t < b for a, b in spans) for t in starts)
    assert max(lanes) + 1 == peak


@pytest.fixture(scope="module")
def steps_run(tmp_path_factory) -> Path:
    """The tiny report run, engine arm only, with record_steps: steps.csv and events.csv."""
    return make_run(
        tmp_path_factory.mktemp("steps") / "tiny", record_steps=True, arms={"engine": {}}
    )


def test_real_run_every_event_valid(steps_run, tmp_path):
    path, tl, count = write_timeline(steps_run, tmp_path / "t.json")
    trace = json.loads(path.read_text())
    check_trace_format(trace)
    names = [e["name"] for e in trace["traceEvents"]]
    assert {"prefill", "decode", "route", "KV memory (GB)", "queue (requests)"} <= set(names)
    steps = [e for e in trace["traceEvents"] if e.get("cat") == "step"]
    assert len(steps) == len(pd.read_csv(steps_run / "engine" / "steps.csv"))
    routed = tl.requests[tl.requests.node >= 0]
    assert names.count("route") == len(routed) == sum(n.startswith("request ") for n in names)
    assert {"queued", "prefill"} <= set(names)  # scheduled_s splits queued from prefill
    assert count == len(trace["traceEvents"])


def test_cli_writes_and_refuses(hand_run, tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["timeline", str(hand_run), "--out", str(out), "--start", "0", "--end", "0.5"]) == 0
    assert "timeline:" in capsys.readouterr().out
    check_trace_format(json.loads(out.read_text()))
    assert main(["timeline", str(hand_run)]) == 0
    assert (hand_run / "timeline-engine.json").is_file()
    assert main(["timeline", str(hand_run), "--arm", "nope"]) == 2
    assert "no arm 'nope'" in capsys.readouterr().err
    assert main(["timeline", str(hand_run), "--start", "2", "--end", "1"]) == 2


def test_run_record_steps_flag_then_timeline(tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_config(duration_s=2)))
    run = tmp_path / "run"
    argv = ["run", "--config", str(config), "--arms", "engine", "--out", str(run)]
    assert main([*argv, "--no-report", "--quiet", "--record-steps"]) == 0
    assert len(pd.read_csv(run / "engine" / "steps.csv")) > 0
    assert main(["timeline", str(run), "--out", str(tmp_path / "t.json")]) == 0
    check_trace_format(json.loads((tmp_path / "t.json").read_text()))
