"""`kvsched timeline RUN_DIR`: one arm of a run as a Chrome trace-event JSON file.

Opens in Perfetto (ui.perfetto.dev, "Open trace file") and chrome://tracing. Trace-event format
(the "JSON Array/Object Format" document): ts and dur in microseconds of simulated time.
  pid 0              the router: one instant per routing decision (args: request, node, wait)
  pid n + 1          node n:
    tid 0 "steps"    one complete slice per step (args: batch size, prefill chunks and tokens,
                     decode count, decode context, cached tokens, preempted); needs steps.csv
    tid 1 "events"   instants: preemptions, evictions, crashes, OOMs, requests that failed
    tid 2 "network"  transfers this node sent (placed runs with transfers.csv)
    tid 10 + k       request lanes: a slice per request with its phases nested inside
                     (routing, queued, prefill, decode); no two requests share a lane at once
    counters         KV memory (GB: used, cached, free) and queue length (waiting, running)
Only what overlaps --start/--end is written, clipped to it, so the file grows with the window.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from reports.timeline_data import Timeline, assign_lanes, load_timeline, request_phases

ROUTER_PID, STEPS_TID, EVENTS_TID, NETWORK_TID, FIRST_LANE_TID = 0, 0, 1, 2, 10
GB = 1e9


def us(t_s: float) -> float:
    """Simulated seconds as trace microseconds (nanosecond resolution; ends round alike)."""
    return round(t_s * 1e6, 3)


def _slice(name, cat, pid, tid, start_s, end_s, args=None) -> dict:
    ts = us(start_s)
    event = {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": round(us(end_s) - ts, 3)}
    event.update(pid=pid, tid=tid)
    return {**event, "args": args} if args else event


def _instant(name, cat, pid, tid, t_s, args) -> dict:
    return {
        "name": name,
        "cat": cat,
        "ph": "i",
        "s": "t",
        "ts": us(t_s),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _metadata(tl: Timeline, num_lanes: list[int]) -> list[dict]:
    def meta(name, pid, tid, value):
        return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": value}

    out = [meta("process_name", ROUTER_PID, 0, {"name": "router"})]
    out.append(meta("process_sort_index", ROUTER_PID, 0, {"sort_index": 0}))
    for node in range(tl.num_nodes):
        pid = node + 1
        out += [meta("process_name", pid, 0, {"name": f"node {node}"})]
        out.append(meta("process_sort_index", pid, 0, {"sort_index": pid}))
        names = {STEPS_TID: "steps", EVENTS_TID: "events", NETWORK_TID: "network"}
        names.update({FIRST_LANE_TID + k: f"requests {k}" for k in range(num_lanes[node])})
        for tid, name in names.items():
            out.append(meta("thread_name", pid, tid, {"name": name}))
            out.append(meta("thread_sort_index", pid, tid, {"sort_index": tid}))
    return out


def _step_kind(s) -> str:
    if s.num_prefill and s.num_decode:
        return "prefill+decode"
    return "prefill" if s.num_prefill else "decode"


def _step_args(s) -> dict:
    """Every column of the step's row but where and when (those are the slice): the counts of
    sim/steps.py, and whatever else the writer added (the engine's measured times)."""
    args = {}
    for key, value in s._asdict().items():
        if key in ("node", "start_s", "duration_s") or not pd_ok(value):
            continue
        args[key] = value if isinstance(value, str) else _number(value)
    return args


def _number(value) -> int | float:
    return int(value) if float(value).is_integer() else round(float(value), 9)


def _request(value) -> int | str:
    """A request id as requests.csv holds it: an integer, or a trace's own text id ("req-1")."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def _steps(tl: Timeline) -> list[dict]:
    if tl.steps is None:
        return []
    out: list[dict] = []
    last_end: dict[int, float] = {}  # pid -> end of its last step slice
    for s in tl.steps.sort_values(["node", "start_s"]).itertuples(index=False):
        pid, end = int(s.node) + 1, min(s.start_s + s.duration_s, tl.end_s)
        # steps.csv rounds start and duration apart (6 decimals): back-to-back steps may overlap
        # by a microsecond, and the slices of one thread must not.
        start = max(s.start_s, tl.start_s, last_end.get(pid, -math.inf))
        last_end[pid] = max(end, start)
        out.append(
            _slice(_step_kind(s), "step", pid, STEPS_TID, start, max(end, start), _step_args(s))
        )
        if s.preempted and tl.events is None and s.start_s >= tl.start_s:
            args = {"requests": int(s.preempted)}
            out.append(_instant("preempt", "preempt", pid, EVENTS_TID, s.start_s, args))
    return out


def _requests(tl: Timeline) -> tuple[list[dict], list[int]]:
    """Request slices on lanes of their node; the router's decisions; failures as instants."""
    out, lanes_per_node = [], [0] * tl.num_nodes
    rows = list(tl.requests.itertuples(index=False))
    by_node: dict[int, list] = {}
    for r in rows:
        if r.node >= 0:
            by_node.setdefault(int(r.node), []).append((r, request_phases(r, tl.start_s, tl.end_s)))
        elif tl.start_s <= r.arrival_s <= tl.end_s:  # never placed: it failed at the router
            args = {
                "request": _request(r.request_id),
                "status": str(getattr(r, "status", "failed")),
            }
            out.append(_instant("failed", "crash", ROUTER_PID, 0, r.arrival_s, args))
        if r.node >= 0 and pd_ok(r.routed_s) and tl.start_s <= r.routed_s <= tl.end_s:
            wait_ms = round((r.routed_s - r.arrival_s) * 1e3, 3)
            args = {"request": _request(r.request_id), "node": int(r.node), "wait_ms": wait_ms}
            out.append(_instant("route", "router", ROUTER_PID, 0, r.routed_s, args))
    for node, items in by_node.items():
        items = [(r, ph) for r, ph in items if ph]
        lanes = assign_lanes([(ph[0][1], ph[-1][2]) for _, ph in items])
        lanes_per_node[node] = max(lanes, default=-1) + 1
        for (r, phases), lane in zip(items, lanes, strict=True):
            pid, tid = node + 1, FIRST_LANE_TID + lane
            out.append(
                _slice(
                    f"request {_request(r.request_id)}",
                    "request",
                    pid,
                    tid,
                    phases[0][1],
                    phases[-1][2],
                    _request_args(r),
                )
            )
            out += [_slice(name, "request", pid, tid, a, b) for name, a, b in phases]
    return out, lanes_per_node


def pd_ok(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _request_args(r) -> dict:
    keys = ["tag", "prompt_tokens", "cached_tokens", "output_tokens", "preemptions", "status"]
    args: dict[str, str | int] = {"request": _request(r.request_id)}
    for key in keys:
        value: Any = getattr(r, key, None)  # a pandas scalar (or absent)
        if pd_ok(value):
            args[key] = value if isinstance(value, str) else int(value)
    return args


def _events(tl: Timeline) -> list[dict]:
    """events.csv's instants (preemptions; evictions and crashes where the writer records them);
    without evict rows, evictions from the evicted_pages counter between samples."""
    out = []
    if tl.events is not None:
        out = [
            _instant(
                e.kind,
                e.kind,
                int(e.node) + 1,
                EVENTS_TID,
                e.time_s,
                {"request": _request(e.request_id), "value": int(e.value)},
            )
            for e in tl.events.itertuples(index=False)
        ]
    recorded = set(tl.events.kind) if tl.events is not None else set()
    if "evict" in recorded or "evicted_pages" not in tl.series.columns:
        return out
    for node, s in tl.series.sort_values("time_s").groupby("node"):
        delta = s.evicted_pages.diff().fillna(0).to_numpy()
        for t, pages in zip(s.time_s.to_numpy(), delta, strict=True):
            if pages > 0:
                args = {"pages_since_last_sample": int(pages)}
                out.append(_instant("evict", "evict", int(node) + 1, EVENTS_TID, t, args))
    return out


def _counters(tl: Timeline) -> list[dict]:
    s = tl.series
    out = []
    has_kv = {"kv_capacity_bytes", "kv_allocated_bytes"} <= set(s.columns)
    for row in s.itertuples(index=False):
        pid, ts = int(row.node) + 1, us(row.time_s)
        if has_kv:
            cached = getattr(row, "kv_cached_bytes", 0) or 0
            retired = getattr(row, "kv_retired_bytes", 0) or 0
            free = row.kv_capacity_bytes - row.kv_allocated_bytes - cached - retired
            kv = {
                "used": round(row.kv_allocated_bytes / GB, 3),
                "cached": round(cached / GB, 3),
                "free": round(free / GB, 3),
            }
            out.append(
                {"name": "KV memory (GB)", "ph": "C", "ts": ts, "pid": pid, "tid": 0, "args": kv}
            )
        if hasattr(row, "waiting"):
            queue = {"waiting": int(row.waiting), "running": int(getattr(row, "running", 0))}
            out.append(
                {
                    "name": "queue (requests)",
                    "ph": "C",
                    "ts": ts,
                    "pid": pid,
                    "tid": 0,
                    "args": queue,
                }
            )
    return out


def _transfers(tl: Timeline) -> list[dict]:
    if tl.transfers is None:
        return []
    out = []
    for t in tl.transfers.itertuples(index=False):
        a, b = max(t.start_s, tl.start_s), min(t.end_s, tl.end_s)
        args = {
            "request": _request(t.request_id),
            "to_node": int(t.dst_node),
            "bytes": int(t.bytes),
        }
        out.append(
            _slice(
                f"{t.kind} -> node {int(t.dst_node)}",
                "network",
                int(t.src_node) + 1,
                NETWORK_TID,
                a,
                b,
                args,
            )
        )
    return out


def trace_events(tl: Timeline) -> list[dict]:
    requests, lanes = _requests(tl)
    body = _steps(tl) + requests + _events(tl) + _counters(tl) + _transfers(tl)
    return _metadata(tl, lanes) + sorted(body, key=lambda e: e["ts"])


def build_trace(tl: Timeline) -> dict:
    return {
        "traceEvents": trace_events(tl),
        "displayTimeUnit": "ms",
        "otherData": {
            "run": tl.run,
            "arm": tl.arm,
            "window_s": [tl.start_s, tl.end_s],
            "steps_recorded": tl.steps is not None,
            "clock": "simulated time (ts in microseconds)",
        },
    }


def write_timeline(run_dir, out, arm=None, start_s=None, end_s=None) -> tuple[Path, Timeline, int]:
    """Write the trace; returns (path, what was read, number of events)."""
    tl = load_timeline(run_dir, arm, start_s, end_s)
    trace = build_trace(tl)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        json.dump(trace, f, separators=(",", ":"))
    return out, tl, len(trace["traceEvents"])
