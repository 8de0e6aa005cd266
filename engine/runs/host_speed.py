"""The serving host's two speeds, from the committed runs (session 11, 2026-12-01).

    python engine/runs/host_speed.py [--errors]

1. The VM without GPU work (logs/2026-12-01_host_speed/hostspeed.json.gz): a fixed ~1 ms piece
   of pure Python timed back to back, unpinned, pinned to one vCPU, and on all 16 vCPUs at once.
2. Each engine run's share of 0.5 s windows in the slow mode: decode-only steps' `prep_s` (host
   work of a fixed kind: the batch's inputs) at more than 1.5x the run's 10th percentile. Relative
   to the run itself: a run wholly in one mode reads 0 (pinned_multi_turn_repeat: its decode
   steps' prep_s 10th percentile is 113 us, the other multi_turn runs' 46-64 us). Runs served
   after session 11 carry host_speed.csv (engine/host_probe.py), an absolute measure.
3. multi_turn served twice in one process, four times in two (host_speed_s11/: unpinned, then
   pinned to two vCPUs with taskset), and round 9's: per-request TTFT / TPOT between two runs
   of the same config (`kvsched validate --repeat`'s errors).
4. --errors: each workload's step-price errors (all three measured terms, held-out overheads)
   split by the mode of the window the step ran in (runs `kvsched validate`, ~1 min a run).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd

import kvsched.validate as validate
from engine.runs import validations

RUNS = Path(__file__).resolve().parent
DIAG = RUNS / "logs" / "2026-12-01_host_speed" / "hostspeed.json.gz"
SESSION11 = RUNS / "host_speed_s11"
WINDOW_S, SLOW = 0.5, 1.5


def diag_table() -> pd.DataFrame:
    data = json.loads(gzip.decompress(DIAG.read_bytes()))
    series = {"unpinned, alone": data["unpinned"], "vCPU 2, alone": data["pinned2"]}
    series |= {f"vCPU {k[3:]}, all at once": rows for k, rows in data["all"].items()}
    out = {}
    for name, rows in series.items():
        us = np.array([r[1] for r in rows])
        out[name] = {"samples": us.size, **{f"p{q}_us": np.percentile(us, q) for q in (10, 50, 90)}}
    return pd.DataFrame(out).T.round(1)


def window_ratios(steps: pd.DataFrame) -> pd.Series:
    """Each 0.5 s window's decode-only steps' median `prep_s` over the run's 10th percentile."""
    decode = steps[steps.num_prefill == 0]
    prep = decode.groupby(decode.start_s // WINDOW_S).prep_s.median()
    return prep / decode.prep_s.quantile(0.10)


def slow_windows(run_dir: Path) -> tuple[float, str]:
    """Share of the run's windows in the slow mode, and the windows as a strip (# slow)."""
    slow = window_ratios(pd.read_csv(run_dir / "engine" / "steps.csv")).to_numpy() > SLOW
    return float(slow.mean()), "".join("#" if s else "." for s in slow)


def mode_of_steps(run_dir: Path) -> np.ndarray:
    """Each step's window is slow (True) or not, as slow_windows decides."""
    steps = pd.read_csv(run_dir / "engine" / "steps.csv")
    ratio = (steps.start_s // WINDOW_S).map(window_ratios(steps))
    return ratio.ffill().bfill().to_numpy() > SLOW


def engine_pairs() -> list[tuple[Path, Path]]:
    mt = [SESSION11 / f"{p}_multi_turn{r}" for p in ("unpinned", "pinned") for r in ("", "_repeat")]
    round9 = RUNS / "round9" / "multi_turn"  # served at 02:23 UTC, the same code
    return [(mt[0], mt[1]), (mt[2], mt[3]), (mt[0], mt[2]), (round9, mt[0])] + [
        (round9, mt[k]) for k in (1, 2, 3)
    ]


def repeat_row(a: Path, b: Path) -> dict:
    out = validate.repeat_errors(a, validate.load_engine_run(a), 0, b)
    keys = ("ttft_median_abs_err", "ttft_p90_abs_err", "tpot_median_abs_err", "ttft_p50_rel_err")
    return {"runs": f"{a.relative_to(RUNS)} vs {b.relative_to(RUNS)}"} | {k: out[k] for k in keys}


def errors_by_mode(run_dir: Path) -> dict:
    terms = validations.MEASURED_TERMS["all"]
    _, tables = validate.validate(run_dir, validations.probes_for(run_dir), terms)
    steps = tables["steps"].reset_index(drop=True)
    rel = (steps.predicted_s - steps.measured_s) / steps.measured_s
    slow = mode_of_steps(run_dir)[: len(steps)]
    chunk = steps.prefill.to_numpy()
    row: dict = {"run": run_dir.name}
    for kind, sel in (("decode", ~chunk), ("chunk", chunk)):
        for mode, in_mode in (("fast", ~slow), ("slow", slow)):
            picked = rel[sel & in_mode]
            row[f"{kind} {mode} (n)"] = f"{picked.median():+.3f} ({picked.size})"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--errors", action="store_true", help="step errors by mode (slow)")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    print("1. a fixed ~1 ms of pure Python on the H200 VM, us\n" + diag_table().to_string())
    print(f"\n2. share of {WINDOW_S} s windows in the slow mode (decode prep > {SLOW}x its p10)")
    runs = validations.measured_runs() + sorted(p for p in SESSION11.iterdir() if p.is_dir())
    for run in runs:
        share, strip = slow_windows(run)
        print(f"  {str(run.relative_to(RUNS)):38s} {share:4.2f}  {strip[:90]}")
    print("\n3. multi_turn against itself (per-request errors, engine vs engine)")
    print(pd.DataFrame([repeat_row(a, b) for a, b in engine_pairs()]).round(4).to_string())
    if args.errors:
        print("\n4. step-price error (median, signed) by the host's mode, all three terms")
        workloads = [r for r in validations.measured_runs() if validations.is_workload(r)]
        print(pd.DataFrame([errors_by_mode(r) for r in workloads]).to_string(index=False))


if __name__ == "__main__":
    main()
