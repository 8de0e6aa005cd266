"""Sweep results on disk: an append-only journal of finished points and the table built from it.

  DIR/sweep.json     the plan: the spec, the base, every point's index, axis values, arm, id and
                     resolved config (what reports/ reads to print a point's config)
  DIR/points.jsonl   one JSON line per finished point, appended with one write + fsync as the point
                     finishes; a killed sweep loses at most the points in flight. A torn last line
                     (killed mid-write) is cut off when the journal is next opened.
  DIR/sweep.csv      the table, rebuilt at most once a second while points finish and when the
                     sweep stops (temporary file + atomic rename)
  DIR/sweep.parquet  the same table, written when the sweep stops (needs pyarrow)

A point is recognised by its id, a hash of the exact config it simulates, so a re-run (or a
sweep whose axes grew) skips every point already done; failed points are run again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from kvsched.outdir import ensure_dir
from kvsched.sweep_spec import Point, Sweep
from kvsched.sweep_validate import ARM_AXIS
from sim.config import ConfigError
from sim.rundir import cell

JOURNAL, PLAN, TABLE_CSV, TABLE_PARQUET = "points.jsonl", "sweep.json", "sweep.csv", "sweep.parquet"
OK, FAILED = "ok", "failed"


class SweepStore:
    def __init__(self, out_dir: str | Path, sweep: Sweep):
        self.dir = Path(out_dir)
        self.sweep = sweep
        self.records: dict[str, dict] = {}  # point id -> its latest record

    def read(self, restart: bool = False) -> None:
        """Read what earlier runs finished (nothing if restarting); writes nothing."""
        journal = self.dir / JOURNAL
        if restart or not journal.exists():
            return
        _cut_torn_tail(journal)
        for number, line in enumerate(journal.read_text().splitlines(), start=1):
            try:
                record = json.loads(line)
                self.records[str(record["point_id"])] = record
                record["status"]  # noqa: B018 (a record without a status is corrupt too)
            except (ValueError, TypeError, KeyError):
                raise ConfigError(
                    f"{journal}:{number}: not a point record; delete the line to run that "
                    "point again, or use --restart"
                ) from None

    def open(self, restart: bool = False) -> None:
        """Create the directory and write the plan (after `read`: restarting drops the results)."""
        ensure_dir(self.dir, "sweep")
        if restart:
            for name in (JOURNAL, TABLE_CSV, TABLE_PARQUET):
                (self.dir / name).unlink(missing_ok=True)
        _write_atomic(self.dir / PLAN, json.dumps(self._plan(), indent=1, default=str) + "\n")

    def _plan(self) -> dict:
        spec = self.sweep.spec.model_dump(mode="json")
        spec["base"] = self.sweep.base
        points = [
            {
                "index": p.index,
                "point_id": p.point_id,
                "arm": p.arm,
                "values": p.values,
                "config": p.config,
            }
            for p in self.sweep.points
        ]
        return {"spec": spec, "grid_size": self.sweep.grid_size, "points": points}

    def is_done(self, point: Point) -> bool:
        record = self.records.get(point.point_id)
        return record is not None and record["status"] == OK

    def append(self, record: dict) -> None:
        line = (json.dumps(record, default=str) + "\n").encode()  # key order = column order
        fd = os.open(self.dir / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(
                fd, line
            )  # one write of one line: a record is in the journal whole or not at all
            os.fsync(fd)
        finally:
            os.close(fd)
        self.records[record["point_id"]] = record

    def counts(self) -> tuple[int, int]:
        """(done, failed) among the plan's points."""
        statuses = [
            self.records[p.point_id]["status"]
            for p in self.sweep.points
            if p.point_id in self.records
        ]
        return statuses.count(OK), statuses.count(FAILED)

    def table(self) -> pd.DataFrame:
        return build_table(self.sweep, self.records)

    def write_table(self, parquet: bool = False) -> pd.DataFrame:
        df = self.table()
        _write_atomic(self.dir / TABLE_CSV, df.to_csv(index=False))
        if parquet:
            write_parquet(df, self.dir / TABLE_PARQUET)
        return df


def build_table(sweep: Sweep, records: dict[str, dict]) -> pd.DataFrame:
    """One row per finished plan point in grid order: point, axes, status, metrics, the latency
    model, wall_s, error, point id."""
    rows, metric_names = [], {}
    for p in sweep.points:
        record = records.get(p.point_id)
        if record is None:
            continue
        metrics = record.get("metrics") or {}
        metric_names.update(dict.fromkeys(metrics))
        row = {"point": p.index, **{k: cell(v) for k, v in p.values.items()}}
        row.update(
            status=record["status"],
            **metrics,
            latency_model=record.get("latency_model"),
            wall_s=record["wall_s"],
            error=record.get("error"),
            point_id=p.point_id,
        )
        rows.append(row)
    axes = list(sweep.spec.axes)
    metrics = [m for m in metric_names if m not in axes and m != ARM_AXIS]
    columns = ["point", *axes, "status", *metrics, "latency_model", "wall_s", "error", "point_id"]
    return pd.DataFrame(rows, columns=columns)


def write_parquet(df: pd.DataFrame, path: Path) -> bool:
    """Write the table as parquet if pyarrow is installed; False (and no file) otherwise."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    tmp = path.with_name(path.name + ".tmp")
    # An axis may mix types (null and numbers, say): parquet columns hold one type, so text.
    mixed = [c for c in df.columns if df[c].dtype == object]
    df.astype({c: "string" for c in mixed}).to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return True


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _cut_torn_tail(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
