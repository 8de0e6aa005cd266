"""Decode-only steps' GPU time per run, two rounds side by side: a kernel change measured on
the engine's own served steps (two runs of the same configs: medians over each run's steps, of
the same decode count and context sum where the runs served alike).

    python engine/runs/decode_gpu_by_round.py [BEFORE_DIR] [AFTER_DIR]

Defaults: `round8/` (the session-9 decode kernel) against `round9_deferred_row_sum/`
(f17a3d6's decode defaults: deferred row sums on). Prints, per run present in both,
the medians over decode-only steps of `gpu_s` (ms), of GPU time per 1K decode context tokens
(us), the decode count and the context sum, and the ratio of the GPU medians.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

RUNS = Path(__file__).resolve().parent


def decode_medians(run_dir: Path) -> dict[str, float]:
    steps = pd.read_csv(run_dir / "engine" / "steps.csv")
    decode = steps[steps.num_prefill == 0]
    return {
        "gpu ms": decode.gpu_s.median() * 1e3,
        "us per 1K ctx": (decode.gpu_s / decode.decode_ctx_sum).median() * 1e9,
        "decodes": decode.num_decode.median(),
        "ctx K": decode.decode_ctx_sum.median() / 1e3,
    }


def main() -> None:
    before = Path(sys.argv[1]) if len(sys.argv) > 1 else RUNS / "round8"
    after = Path(sys.argv[2]) if len(sys.argv) > 2 else RUNS / "round9_deferred_row_sum"
    rows = {}
    for run in sorted(p.name for p in after.iterdir() if (p / "engine" / "steps.csv").is_file()):
        if not (before / run / "engine" / "steps.csv").is_file():
            continue
        b, a = decode_medians(before / run), decode_medians(after / run)
        rows[run] = {
            **{f"before {k}": v for k, v in b.items()},
            **{f"after {k}": v for k, v in a.items()},
            "after / before": a["gpu ms"] / b["gpu ms"],
        }
    pd.set_option("display.width", 250)
    print(pd.DataFrame(rows).T.round(3).to_string())


if __name__ == "__main__":
    main()
