"""`kvsched check`: a regression gate of a run against a committed baseline file.

The baseline holds, per arm, the gated metrics, their tolerances and the arm's resolved config:
  {"arms": {arm: {"metrics": {key: value}, "tolerances": {key: {"abs": x} | {"rel": x}},
                  "config": {...}}}, "latency_model": ..., "version": ...}
Tolerances are absolute for shares (prefix hit rate: 0.02 = 2 points) and relative for latencies
and throughputs (0.10 = 10% of the baseline value). Only a move in the worse direction beyond the
tolerance is a regression. Exit 0 within tolerance, 1 on regression, 2 on unusable input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from reports.catalog import fmt, metric, number
from reports.output import write_output
from reports.rundata import Run, load_run, read_json
from sim.config import ConfigError

DEFAULT_TOLERANCES = {
    "prefix_hit_rate": {"abs": 0.02},
    "p99_ttft_ms": {"rel": 0.10},
    "p99_tpot_ms": {"rel": 0.10},
    "p99_e2el_ms": {"rel": 0.10},
    "output_throughput": {"rel": 0.05},
    "request_throughput": {"rel": 0.05},
}


@dataclass(frozen=True, slots=True)
class Move:
    arm: str
    key: str
    base: float
    value: float | None  # None: the run has no value (e.g. nothing finished)
    allowed: float  # in the metric's stored unit
    tolerance: dict
    regressed: bool
    improved: bool  # better than the baseline by more than the tolerance

    def describe(self) -> str:
        m = metric(self.key)
        unit = f" {m.unit}" if m.unit and m.unit != "%" else ""
        now = (
            "none"
            if self.value is None
            else fmt(self.key, self.value) + ("%" if m.unit == "%" else unit)
        )
        was = fmt(self.key, self.base) + ("%" if m.unit == "%" else unit)
        if "abs" in self.tolerance:
            pts = m.unit == "%"
            move = (
                ""
                if self.value is None
                else f"{(self.value - self.base) * m.scale:+.1f}{' pts' if pts else unit}; "
            )
            tol = f"{self.tolerance['abs'] * m.scale:.1f}{' pts' if pts else unit}"
        else:
            change = (
                None if self.value is None or not self.base else (self.value / self.base - 1) * 100
            )
            move = "" if change is None else f"{change:+.1f}%; "
            tol = f"{self.tolerance['rel'] * 100:.1f}%"
        return f"{self.arm} {self.key}: {was} -> {now} ({move}tolerance {tol})"


def _tolerance(arm: str, key: str, spec) -> dict:
    ok = isinstance(spec, dict) and len(spec) == 1 and next(iter(spec)) in ("abs", "rel")
    if not ok or (v := number(next(iter(spec.values())))) is None or v < 0:
        raise ConfigError(
            f'baseline: arms.{arm}.tolerances.{key} must be {{"abs": x}} or {{"rel": x}} with x >= 0'
        )
    return spec


def compare_metric(arm: str, key: str, base, value, spec: dict) -> Move:
    base_v = number(base)
    if base_v is None:
        raise ConfigError(f"baseline: arms.{arm}.metrics.{key} must be a number, got {base!r}")
    tol = _tolerance(arm, key, spec)
    allowed = tol["abs"] if "abs" in tol else tol["rel"] * abs(base_v)
    v = number(value)
    better = metric(key).better or -1  # a metric with no direction is gated against rising
    if v is None:
        return Move(arm, key, base_v, None, allowed, tol, regressed=True, improved=False)
    delta = (v - base_v) * better  # > 0: better
    return Move(
        arm,
        key,
        base_v,
        v,
        allowed,
        tol,
        regressed=delta < -allowed - 1e-12,
        improved=delta > allowed + 1e-12,
    )


def check_run(run: Run, baseline: dict) -> list[Move]:
    arms = baseline.get("arms")
    if not isinstance(arms, dict) or not arms:
        raise ConfigError("baseline: no arms; write one with --update")
    missing = [a for a in arms if a not in run.arms]
    if missing:
        raise ConfigError(
            f"arm(s) {', '.join(missing)} in the baseline but not in the run; run arms: {', '.join(run.arms)}"
        )
    extra = [a for a in run.arms if a not in arms]
    if extra:
        raise ConfigError(
            f"unknown arm(s) {', '.join(extra)}: not in the baseline (baseline arms: {', '.join(arms)}); "
            "add them with --update"
        )
    moves = []
    for arm, entry in arms.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("metrics"), dict):
            raise ConfigError(f"baseline: arms.{arm}.metrics must be a mapping of metric to value")
        tolerances = entry.get("tolerances") or {}
        got = run.arms[arm].metrics
        for key, base in entry["metrics"].items():
            if key not in got:
                raise ConfigError(f"run: {arm} has no metric {key!r} in summary.json")
            moves.append(
                compare_metric(
                    arm,
                    key,
                    base,
                    got[key],
                    tolerances.get(key, DEFAULT_TOLERANCES.get(key, {"rel": 0.10})),
                )
            )
    return moves


def flatten(d, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}{k}."))
    return out


def config_changes(old: dict, new: dict, limit: int = 8) -> list[str]:
    """Dotted config fields that differ between the baseline's arm and the run's: why metrics moved."""
    a, b = flatten(old), flatten(new)
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    lines = [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys[:limit]]
    return lines + ([f"... and {len(keys) - limit} more"] if len(keys) > limit else [])


def build_baseline(run: Run, previous: dict) -> dict:
    """A baseline from a run; tolerances already in `previous` (hand-tuned) are kept."""
    old_arms = previous.get("arms")
    if not isinstance(old_arms, dict):
        old_arms = {}
    arms = {}
    for name, arm in run.arms.items():
        old_tol = (old_arms.get(name) or {}).get("tolerances") or {}
        keys = [k for k in DEFAULT_TOLERANCES if number(arm.metrics.get(k)) is not None]
        arms[name] = {
            "metrics": {k: arm.metrics[k] for k in keys},
            "tolerances": {k: old_tol.get(k, DEFAULT_TOLERANCES[k]) for k in keys},
            "config": arm.config,
        }
    return {
        "about": "kvsched check baseline: per arm, gated metrics, tolerances (abs: absolute in the metric's "
        "stored unit; rel: share of the baseline value) and the arm's resolved config. "
        "Rewrite on purpose with `kvsched check RUN --baseline FILE --update`.",
        "run": run.label,
        "seed": run.summary.get("seed"),
        "version": run.summary.get("version"),
        "latency_model": run.summary.get("latency_model"),
        "arms": arms,
    }


def run_check(run_dir: str, baseline_path: str, update: bool = False) -> int:
    run = load_run(run_dir, frames=False)
    path = Path(baseline_path)
    if update:
        previous = read_json(path, "--baseline", required=False)
        text = json.dumps(build_baseline(run, previous), indent=2) + "\n"
        write_output(path, text, "--baseline", signature=None)  # --update: replacing is the point
        print(f"baseline written: {path} ({len(run.arms)} arm(s): {', '.join(run.arms)})")
        return 0
    baseline = read_json(path, "--baseline")
    moves = check_run(run, baseline)
    return report_moves(run, baseline, moves, str(path))


def report_moves(run: Run, baseline: dict, moves: list[Move], path: str) -> int:
    bad = [m for m in moves if m.regressed]
    print(
        f"check {run.path} against {path}: {len(moves)} metric(s) over {len(baseline['arms'])} arm(s)"
    )
    for m in bad:
        print(f"  REGRESSION {m.describe()}")
    for m in (m for m in moves if m.improved):
        print(f"  improved   {m.describe()}")
    if baseline.get("latency_model") and baseline.get("latency_model") != run.summary.get(
        "latency_model"
    ):
        print(
            f"  note: latency model {baseline['latency_model']} in the baseline, {run.summary.get('latency_model')} in the run"
        )
    for arm in dict.fromkeys(m.arm for m in bad + [m for m in moves if m.improved]):
        changes = config_changes(baseline["arms"][arm].get("config") or {}, run.arms[arm].config)
        if changes and run.arms[arm].config:
            print(f"  config of {arm} differs from the baseline's: " + "; ".join(changes))
    if bad:
        print(
            f"FAIL: {len(bad)} metric(s) regressed beyond tolerance in {len({m.arm for m in bad})} arm(s); "
            "if intended, rewrite the baseline with --update"
        )
        return 1
    improved = sum(m.improved for m in moves)
    print(
        "ok: every metric within tolerance"
        + (f" ({improved} improved beyond it; consider --update)" if improved else "")
    )
    return 0
