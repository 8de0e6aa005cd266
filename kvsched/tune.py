"""`kvsched tune --model PRESET`: the article's per-model template (section 7): sweep, then choose.

For one model preset it sweeps the page size, the scored eviction's half-life and prefix-length
weight, the protected-zone share and the admission threshold on a workload, and writes:
  DIR/sweep.yaml   the generated sweep (re-run or edit it with `kvsched sweep`)
  DIR/sweep.csv, points.jsonl, report.html   as `kvsched sweep` writes them
  DIR/tuned.yaml   the chosen config, ready for `kvsched run --config DIR/tuned.yaml`
  DIR/choice.md    the choice, and each axis's effect on the objective, P99 TTFT and hit rate
The choice: among configurations (mean over seeds) within --max-p99-ttft-ms, the best on
--objective; ties go to the lower point index.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvsched.boundary import finite_float
from kvsched.outdir import ensure_dir
from kvsched.sweep import add_backend_args, check_backend_args, finish, run_sweep
from kvsched.sweep_spec import parse_sweep
from sim.config import ConfigError, load_config_file

# The template. Values bracket each default; the page sizes span the article's 16 both ways;
# protected_share 0.01: prefixes reused by 2 of the last 200 requests (zone capped at 25% of the pool)
# vs the article's 95%; min_tokens null = the break-even length from the model's rebuild cost.
TUNE_POLICIES = {"eviction": {"name": "scored"}, "admission": {"name": "threshold"}}
TUNE_CACHE = {"protected_zone": True}
TUNE_AXES: dict[str, list] = {
    "cache.page_size": [8, 16, 32, 64],
    "policies.eviction.params.half_life_s": [15.0, 120.0],
    "policies.eviction.params.length_weight": [0.0, 2.0],
    "cache.protected_share": [0.01, 0.95],
    "policies.admission.params.min_tokens": [None, 0, 512],
}
DEFAULT_DURATION_S = 60.0


def tune_spec(
    model: str,
    base: dict,
    workload: str | None,
    duration_s: float | None,
    seeds: list[int],
    budget: int | None,
) -> dict:
    """The sweep mapping for one model: base + template policies, template axes + seeds."""
    base = {**base, "model": model, "name": f"tune-{model}"}
    if workload is not None and workload != (base.get("workload") or {}).get("name"):
        base["workload"] = {"name": workload}
    if duration_s is not None or "duration_s" not in base:
        base["duration_s"] = duration_s or DEFAULT_DURATION_S
    base["cache"] = {**(base.get("cache") or {}), **TUNE_CACHE}
    policies = dict(base.get("policies") or {})
    for kind, spec in TUNE_POLICIES.items():
        if (policies.get(kind) or {}).get("name") != spec["name"]:
            policies[kind] = dict(spec)  # a base already on the template's policy keeps its params
    base["policies"] = policies
    sweep: dict[str, Any] = {
        "name": f"tune-{model}",
        "base": base,
        "arm": "engine",
        "axes": {**TUNE_AXES, "seed": seeds},
    }
    if budget is not None:
        sweep.update(sampling="random", budget=budget)
    return sweep


def choose(sweep_dir: Path, objective: str, max_p99_ttft_ms: float | None) -> dict | None:
    from reports.sweep_analysis import best_by, configurations, load_sweep_dir

    configs = configurations(load_sweep_dir(sweep_dir))
    if max_p99_ttft_ms is not None:
        configs = configs[configs.p99_ttft_ms <= max_p99_ttft_ms]
    return best_by(configs, objective)


def axis_effects(sweep_dir: Path, metric: str) -> list[str]:
    """Per axis, the metric's mean at each value (over all other axes and seeds): what moves it."""
    from reports.sweep_analysis import configurations, load_sweep_dir

    data = load_sweep_dir(sweep_dir)
    configs = configurations(data)
    lines = []
    for axis in data.config_axes:
        means = configs.groupby(axis, sort=False)[metric].mean()
        spread = (means.max() - means.min()) / abs(means.mean()) if means.mean() else 0.0
        values = ", ".join(f"{k}: {v:.4g}" for k, v in means.items())
        lines.append(f"- {axis} (spread {spread:.1%}): {values}")
    return lines


def write_choice(out: Path, row: dict, objective: str, max_p99: float | None) -> None:
    from reports.sweep_analysis import OBJECTIVES, axis_values_text, load_sweep_dir, pasteable_yaml

    data = load_sweep_dir(out)
    (out / "tuned.yaml").write_text(pasteable_yaml(data, int(row["point"])))
    metric, sense, label = OBJECTIVES[objective]
    lines = [
        f"# {data.name}: chosen configuration",
        "",
        f"objective: {sense} {label}" + (f", P99 TTFT <= {max_p99:g} ms" if max_p99 else ""),
        f"chosen (point {int(row['point'])}): {axis_values_text(data, row)}",
        f"{metric} = {row[metric]:.4g}, p99_ttft_ms = {row['p99_ttft_ms']:.4g}, "
        f"prefix_hit_rate = {row['prefix_hit_rate']:.4g}, mean over {int(row['seeds'])} seed(s)",
        "",
    ]
    for shown in dict.fromkeys([metric, "p99_ttft_ms", "prefix_hit_rate"]):
        lines += [
            f"## Effect of each axis on {shown} (mean over the other axes)",
            *axis_effects(out, shown),
            "",
        ]
    (out / "choice.md").write_text("\n".join(lines).rstrip() + "\n")


def cmd_tune(args) -> int:
    _check_model(args.model)
    check_backend_args(args)
    base = load_config_file(args.base, flag="--base") if args.base else {}
    seeds = _parse_seeds(args.seeds) if args.seeds else [1]
    spec = tune_spec(args.model, base, args.workload, args.duration, seeds, args.budget)
    sweep = parse_sweep(spec)
    out = Path(args.out or f"runs/tune-{args.model}")
    ensure_dir(out, "sweep")
    (out / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    outcome = run_sweep(
        sweep,
        out,
        args.backend,
        args.workers,
        args.ray_address,
        show_progress=not args.quiet,
        restart=args.restart,
    )
    status = finish(outcome, sweep, out, write_report=not args.no_report)
    if outcome.stop_signal is not None or not outcome.num_done:
        return status
    row = choose(out, args.objective, args.max_p99_ttft_ms)
    if row is None:
        print(f"no configuration meets --max-p99-ttft-ms {args.max_p99_ttft_ms:g}; nothing chosen")
        return 1
    write_choice(out, row, args.objective, args.max_p99_ttft_ms)
    print((out / "choice.md").read_text().rstrip())
    print(f"chosen config: {out / 'tuned.yaml'}")
    return status


def register(sub) -> None:
    from reports.sweep_analysis import OBJECTIVES

    p = sub.add_parser(
        "tune", help="per-model tuning: sweep the cache policy template, pick a config"
    )
    p.add_argument("--model", required=True, help="model preset (article-70b, llama-3-8b, ...)")
    p.add_argument(
        "--base", help="base experiment config (cluster, node, workload); default: the seed study"
    )
    p.add_argument("--workload", help="workload name (replaces the base's workload and its params)")
    p.add_argument(
        "--duration",
        type=finite_float,
        help=f"simulated seconds per point (default: the base's, else {DEFAULT_DURATION_S:g})",
    )
    p.add_argument(
        "--seeds", help="comma-separated seeds; metrics are averaged over them (default 1)"
    )
    p.add_argument(
        "--budget", type=int, help="random sample of this many points instead of the whole grid"
    )
    p.add_argument("--objective", choices=list(OBJECTIVES), default="throughput")
    p.add_argument(
        "--max-p99-ttft-ms", type=finite_float, help="only configurations within this P99 TTFT"
    )
    p.add_argument("--out", help="tune directory (default runs/tune-MODEL; re-run to resume)")
    add_backend_args(p)
    p.set_defaults(func=cmd_tune)


def _parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds: {text!r} is not a comma-separated list of integers") from None
    if not seeds:
        raise ConfigError("--seeds: give at least one seed")
    return seeds


def _check_model(model: str) -> None:
    from sim.presets import MODEL_PRESETS

    if model not in MODEL_PRESETS:
        raise ConfigError(
            f"--model: unknown preset {model!r}; allowed: {', '.join(sorted(MODEL_PRESETS))}"
        )
