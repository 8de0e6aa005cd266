"""`python -m engine.check_gate CHECK.json`: exit 1, naming the entry, if any logits error in an
engine.check result is not finite or above the bound (engine/runs/device_run.sh serves only
after it passes: a check whose graph logits came out NaN must not be followed by serving runs).
"""

from __future__ import annotations

import json
import math
import sys

BOUND = 0.05  # relative L2 error of a logits row; bf16 through 32 random layers stays under 3%
KEYS = ("max_rel_err", "rel_err")


def errors(node, path: str = "") -> list[tuple[str, float]]:
    """Every (path, value) of a logits-error key in the nested result."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in KEYS and isinstance(value, (int, float)):
                found.append((f"{path}{key}", float(value)))
            else:
                found += errors(value, f"{path}{key}.")
    return found


def bad(result: dict) -> list[str]:
    return [f"{p}={v}" for p, v in errors(result) if not math.isfinite(v) or v > BOUND]


def main(argv: list[str] | None = None) -> int:
    path = (argv or sys.argv[1:])[0]
    with open(path) as f:
        result = json.load(f)
    failed = bad(result)
    if failed:
        print(
            f"check gate: {len(failed)} logits error(s) not finite or > {BOUND}: "
            + ", ".join(failed[:6]),
            file=sys.stderr,
        )
        return 1
    print(f"check gate: {len(errors(result))} logits errors, all finite and <= {BOUND}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
