"""Pin every study's results: each study's summary.json metrics, at a short duration.

A change that is meant to move no number must leave every recorded metric identical (new keys
may appear; they are listed, not failed):
    python scripts/study_hashes.py --write   # record (before the change)
    python scripts/study_hashes.py           # compare (after it); exit 1 names what moved
Studies whose trace files are absent (../shared/traces) are skipped with a note. Record again on
purpose, with a note of what moved and why, after a change that is meant to move numbers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "baselines" / "study_summaries.json"
CLI = "kvsched.cli"
DURATION_S = 20.0  # simulated seconds; shorter studies keep their own
# Sweep and tune specs are not single runs.
STUDIES = sorted(
    p for p in (ROOT / "studies").glob("*.yaml") if not p.name.startswith(("sweep_", "tune_"))
) + [ROOT / "baselines" / "seed_study.yaml"]


def run_summary(study: Path, work: Path) -> dict | None:
    out = work / study.stem
    cmd = [sys.executable, "-m", CLI, "run", "--config", str(study), "--out", str(out)]
    cmd += ["--no-report", "--quiet"]
    if float(yaml.safe_load(study.read_text()).get("duration_s", 1e9)) > DURATION_S:
        cmd += ["--duration", str(DURATION_S)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        if "no such file" in done.stderr.lower() and "trace" in done.stderr.lower():
            return None  # trace files absent on this machine
        raise SystemExit(f"{study.name}: exit {done.returncode}: {done.stderr.strip()[-400:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {arm: metrics for arm, metrics in summary["arms"].items()}


def differences(want: dict, got: dict) -> tuple[list[str], list[str]]:
    """(moved metrics, new keys) of one study, as 'arm.key' names."""
    moved, new = [], []
    for arm in sorted(set(want) | set(got)):
        w, g = want.get(arm, {}), got.get(arm, {})
        moved += [f"{arm}.{k}: {w[k]!r} -> {g.get(k)!r}" for k in w if g.get(k, object()) != w[k]]
        new += [f"{arm}.{k}" for k in g if k not in w]
    return moved, new


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the metrics")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="study-summaries-"))
    try:
        got = {s.name: run_summary(s, work) for s in STUDIES}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.write:
        RECORD.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        return 0
    want = json.loads(RECORD.read_text())
    failed = False
    for name, metrics in got.items():
        if metrics is None or want.get(name) is None:
            print(f"{name}: skipped (no trace here or none recorded)")
            continue
        moved, new = differences(want[name], metrics)
        failed |= bool(moved)
        print(
            f"{name}: {'MOVED' if moved else 'same'}" + (f" (new keys: {len(new)})" if new else "")
        )
        for line in moved[:10]:
            print("   ", line)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
