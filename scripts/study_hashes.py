"""Pin every study's results: the sha256 of summary.json per study, at a short duration.

A refactor that is meant to move no number must leave these hashes unchanged:
    python scripts/study_hashes.py --write   # record (before the change)
    python scripts/study_hashes.py           # compare (after it); exit 1 names what moved
Studies whose trace files are absent (../shared/traces) are skipped with a note.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
HASHES = ROOT / "baselines" / "study_hashes.json"
CLI = "kvsched.cli"
DURATION_S = 20.0  # simulated seconds; shorter studies keep their own
# Sweep and tune specs are not single runs; the CI study is pinned by its own gate too.
STUDIES = sorted(
    p for p in (ROOT / "studies").glob("*.yaml") if not p.name.startswith(("sweep_", "tune_"))
) + [ROOT / "baselines" / "seed_study.yaml"]


def summary_hash(study: Path, work: Path) -> str | None:
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
    return hashlib.sha256((out / "summary.json").read_bytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the hashes")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="study-hashes-"))
    try:
        got = {s.name: summary_hash(s, work) for s in STUDIES}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.write:
        HASHES.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        return 0
    want = json.loads(HASHES.read_text())
    moved = [n for n, h in got.items() if h is not None and want.get(n) not in (None, h)]
    for name, h in got.items():
        print(
            f"{name}: {'skipped (no trace)' if h is None else 'moved' if name in moved else 'same'}"
        )
    return 1 if moved else 0


if __name__ == "__main__":
    raise SystemExit(main())
