"""One arm's events, read back from its run directory and cut to a time window.

What the timeline export (reports/timeline.py) and the report's Gantt view (reports/plots_gantt.py)
draw. Files of `<arm>/` (all times in simulated seconds):
  requests.csv    arrival_s, routed_s, first_token_s, finish_s, node, status; scheduled_s when
                  recorded (start of the first prefill chunk)
  timeseries.csv  per-node KV bytes and queue lengths every sample_interval_s
  steps.csv       optional (record_steps): one row per step, STEP_COLUMNS
  events.csv      optional: time_s, node, kind (preempt, evict, crash, oom), request_id, value
  transfers.csv   optional (placed runs): start_s, end_s, src_node, dst_node, request_id, bytes, kind
Rows are kept when they overlap [start_s, end_s]; nothing else is trimmed here.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from reports.rundata import _read_csv, _read_series, read_json
from sim.config import ConfigError
from sim.rundir import arm_dir_name

STEP_COLUMNS = [
    "node",
    "step",
    "start_s",
    "duration_s",
    "num_prefill",
    "prefill_tokens",
    "num_decode",
    "decode_ctx_sum",
    "cached_tokens",
    "batch_size",
    "preempted",
]
EVENT_COLUMNS = ["time_s", "node", "kind", "request_id", "value"]
TRANSFER_COLUMNS = ["start_s", "end_s", "src_node", "dst_node", "request_id", "bytes", "kind"]
REQUEST_COLUMNS = ["request_id", "node", "arrival_s", "routed_s", "first_token_s", "finish_s"]


@dataclass(slots=True)
class Timeline:
    run: str  # the run's name
    arm: str
    start_s: float
    end_s: float
    num_nodes: int
    requests: pd.DataFrame
    series: pd.DataFrame
    steps: pd.DataFrame | None  # None: the run did not record steps
    events: pd.DataFrame | None
    transfers: pd.DataFrame | None


def _optional(path: Path, columns: list[str]) -> pd.DataFrame | None:
    return _read_csv(path, columns) if path.is_file() else None


def _overlapping(frame: pd.DataFrame, first: str, last: str, lo: float, hi: float):
    """Rows whose [first, last] meets [lo, hi]; a missing end (still running) counts as open."""
    end = frame[last].fillna(math.inf)
    return frame[(frame[first] <= hi) & (end >= lo)].reset_index(drop=True)


def choose_arm(run_dir: Path, arm: str | None) -> tuple[str, dict]:
    summary = read_json(run_dir / "summary.json", "run directory")
    arms = list(summary.get("arms") or {})
    if not arms:
        raise ConfigError(f"run directory: {run_dir / 'summary.json'} has no arms")
    if arm is None:
        return arms[0], summary
    if arm not in arms:
        raise ConfigError(f"--arm: no arm {arm!r} in {run_dir}; allowed: {', '.join(arms)}")
    return arm, summary


def load_timeline(
    run_dir: str | Path,
    arm: str | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
) -> Timeline:
    """The arm's events in [start_s, end_s] (default: the whole run)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"run directory: {run_dir} does not exist or is not a directory")
    arm, summary = choose_arm(run_dir, arm)
    duration = (summary["arms"][arm] or {}).get("duration_s")
    lo = 0.0 if start_s is None else float(start_s)
    hi = float(end_s) if end_s is not None else float(duration or math.inf)
    if not lo < hi:
        raise ConfigError(f"--start/--end: the window [{lo:g}, {hi:g}] s is empty")
    d = run_dir / arm_dir_name(arm)
    requests = _read_csv(d / "requests.csv", REQUEST_COLUMNS)
    series = _read_series(d / "timeseries.csv")
    steps = _optional(d / "steps.csv", STEP_COLUMNS)
    events = _optional(d / "events.csv", EVENT_COLUMNS)
    transfers = _optional(d / "transfers.csv", TRANSFER_COLUMNS)
    if math.isinf(hi):  # no duration in summary.json: the last thing that happened
        hi = float(max(requests.finish_s.max(), series.time_s.max()))
    nodes = [requests.node.max(), series.node.max()] + (
        [steps.node.max()] if steps is not None else []
    )
    return Timeline(
        run=str(summary.get("name") or run_dir.name),
        arm=arm,
        start_s=lo,
        end_s=hi,
        num_nodes=int(max(n for n in nodes if pd.notna(n))) + 1,
        requests=_overlapping(requests, "arrival_s", "finish_s", lo, hi),
        series=series[(series.time_s >= lo) & (series.time_s <= hi)].reset_index(drop=True),
        steps=None
        if steps is None
        else steps[(steps.start_s <= hi) & (steps.start_s + steps.duration_s >= lo)].reset_index(
            drop=True
        ),
        events=None
        if events is None
        else events[(events.time_s >= lo) & (events.time_s <= hi)].reset_index(drop=True),
        transfers=None
        if transfers is None
        else _overlapping(transfers, "start_s", "end_s", lo, hi),
    )


def request_phases(row, lo: float, hi: float) -> list[tuple[str, float, float]]:
    """(phase, start, end) of one request, clipped to [lo, hi]: routing (arrival -> routed),
    queued and prefill (or one queued+prefill span without scheduled_s), decode (first token ->
    finish). A request still running at the end of the run ends at hi."""
    arrival, routed = row.arrival_s, _or(row.routed_s, math.inf)
    first, finish = _or(row.first_token_s, math.inf), _or(row.finish_s, math.inf)
    scheduled = _or(getattr(row, "scheduled_s", math.nan), math.nan)
    marks = [("routing", arrival, routed)]
    if math.isnan(scheduled):
        marks.append(("queued+prefill", routed, first))
    else:
        marks += [("queued", routed, scheduled), ("prefill", scheduled, first)]
    marks.append(("decode", first, finish))
    out = []
    for name, a, b in marks:
        a, b = max(a, lo), min(b, finish, hi)
        if a < b:
            out.append((name, a, b))
    return out


def _or(value, default: float) -> float:
    return default if value is None or pd.isna(value) else float(value)


def assign_lanes(intervals: list[tuple[float, float]]) -> list[int]:
    """Lane per interval (in input order) so intervals in one lane never overlap: the lowest
    free lane, in order of start time. Lanes stay few: the peak number of overlapping intervals."""
    busy: list[tuple[float, int]] = []  # heap of (end, lane) of lanes in use
    free: list[int] = []  # heap of lane numbers free again
    lanes = [0] * len(intervals)
    for i in sorted(range(len(intervals)), key=lambda i: intervals[i]):
        start, end = intervals[i]
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(busy)
        heapq.heappush(busy, (end, lane))
        lanes[i] = lane
    return lanes
