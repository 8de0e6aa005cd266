"""The `kvsched` command line: a thin layer over the packages.

Every user error (config, trace, argument, unusable path) exits with status 2 and one line naming
the field or path; SIGINT/SIGTERM/SIGHUP exit 128 + the signal (kvsched/boundary.py, docs/cli.md).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from kvsched.boundary import finite_float, run_guarded
from sim.config import ConfigError, load_config_file

SUMMARY_COLUMNS = [
    ("request_throughput", "req/s", "{:.2f}"),
    ("output_throughput", "out tok/s", "{:.0f}"),
    ("mean_ttft_ms", "mean TTFT ms", "{:.0f}"),
    ("p99_ttft_ms", "P99 TTFT ms", "{:.0f}"),
    ("p99_tpot_ms", "P99 TPOT ms", "{:.1f}"),
    ("prefix_hit_rate", "hit rate", "{:.1%}"),
    ("peak_kv_bytes", "peak KV GB", "{:.0f}"),
    ("alloc_stalls", "stalls", "{}"),
    ("crashes", "crashes", "{}"),
    ("failed", "failed", "{}"),
    ("preemptions", "preempt", "{}"),
    ("completed", "done", "{}"),
    ("unfinished", "unfinished", "{}"),
]
UNFINISHED_WARN_SHARE = 0.01  # above this share of requests left in flight, latencies mislead


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, status 2 (argparse prints usage + message)
        raise ConfigError(f"{self.prog}: {message}")


def _fmt(key: str, value, fmt: str) -> str:
    if value is None:
        return "-"
    if key == "peak_kv_bytes":
        value = value / 1e9
    return fmt.format(value)


def summary_table(summary: dict) -> str:
    arms = summary["arms"]
    head = ["arm", *(label for _, label, _ in SUMMARY_COLUMNS)]
    rows = [
        [arm, *(_fmt(k, m.get(k), f) for k, _, f in SUMMARY_COLUMNS)] for arm, m in arms.items()
    ]
    first: dict = next(iter(arms.values()), {})
    if len(arms) > 1 and first.get("output_throughput"):
        head.append("x thrpt")
        for row, m in zip(rows, arms.values(), strict=True):
            row.append(f"{m['output_throughput'] / first['output_throughput']:.2f}")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(str(c).rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(f"latency model: {summary.get('latency_model')}")
    if "step_overhead_ms" in first:
        lines.append(
            f"step overhead: {first['step_overhead_ms']:g} ms per step "
            f"({first.get('step_overhead_source')})"
        )
    lines += [_unfinished_warning(arm, m) for arm, m in arms.items() if _unfinished_share(m) > 0]
    return "\n".join(line for line in lines if line)


def _unfinished_share(m: dict) -> float:
    total = (m.get("completed") or 0) + (m.get("failed") or 0) + (m.get("unfinished") or 0)
    return (m.get("unfinished") or 0) / total if total else 0.0


def _unfinished_warning(arm: str, m: dict) -> str:
    """One line when more than 1% of an arm's requests never finished: its P99s are optimistic."""
    share = _unfinished_share(m)
    if share <= UNFINISHED_WARN_SHARE:
        return ""
    ttft = _fmt("", m.get("p99_ttft_censored_ms"), "{:.0f}")
    e2el = _fmt("", m.get("p99_e2el_censored_ms"), "{:.0f}")
    return (
        f"warning: {arm}: {m['unfinished']} requests ({share:.1%}) unfinished at the end; "
        f"latencies count finished requests only (censored P99 TTFT >= {ttft} ms, "
        f"P99 E2E >= {e2el} ms)"
    )


def cmd_run(args) -> int:
    from kvsched.arm_pool import check_workers
    from kvsched.experiment import run_experiment

    raw = load_config_file(args.config) if args.config else {}
    if args.duration is not None:
        raw["duration_s"] = args.duration
    if args.seed is not None:
        raw["seed"] = args.seed
    if args.record_steps:
        raw["record_steps"] = True  # <arm>/steps.csv and events.csv: kvsched timeline's input
    if args.exact_steps:
        raw["exact_steps"] = True
    arms = [a.strip() for a in args.arms.split(",") if a.strip()] if args.arms else None
    check_workers(args.workers)
    summary = run_experiment(
        raw,
        args.out,
        arms,
        show_progress=not args.quiet,
        write_report=not args.no_report,
        workers=args.workers,
    )
    print(summary_table(summary))
    print(f"run directory: {args.out}")
    if not args.no_report:
        print(f"report: {Path(args.out) / 'report.html'}")
    return 0


def register(sub) -> None:
    run = sub.add_parser("run", help="simulate an experiment (default: the article's benchmark)")
    run.add_argument("--config", help="YAML or JSON experiment config")
    run.add_argument("--out", default="runs/seed", help="run directory (default runs/seed)")
    run.add_argument(
        "--duration", type=finite_float, help="simulated seconds (overrides duration_s)"
    )
    run.add_argument("--seed", type=int, help="random seed (overrides seed)")
    run.add_argument(
        "--arms", help="comma-separated arms to run (default: the config's, else the built-ins)"
    )
    run.add_argument("--no-report", action="store_true", help="skip report.html")
    run.add_argument(
        "--record-steps", action="store_true", help="write <arm>/steps.csv (kvsched timeline)"
    )
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.add_argument(
        "--workers",
        type=int,
        help="arms simulated at once, each in its own process (default: one per CPU, at most one "
        "per arm; 1: all in this process); the files are the same",
    )
    run.add_argument(
        "--exact-steps",
        action="store_true",
        help="the reference driver: one simulation event per node step (same results, slower)",
    )
    run.set_defaults(func=cmd_run)


KERNEL_COMMANDS = {
    "bench": ("bench_main", "Triton paged-attention micro-benchmark (GPU)"),
    "calibrate": ("calibrate_main", "measure the latency model's tables (GPU)"),
}


def _register_kernels(sub) -> None:
    """`kvsched bench` / `kvsched calibrate` in the command list; main() hands their whole
    argument list (--help included) to the kernel tools."""
    for name, (_, text) in KERNEL_COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False)


def _run_kernel_tool(name: str, rest: list[str]) -> int:
    try:
        module = importlib.import_module("kernels.cli")
    except ImportError as err:
        raise ConfigError(
            f"{name}: needs the kernels extra (torch, triton): pip install 'kvsched[kernels]' "
            f"({err})"
        ) from None
    return getattr(module, KERNEL_COMMANDS[name][0])(rest)


# Each entry is a module with `register(subparsers)`; a feature adds its subcommands there.
COMMAND_MODULES = [
    "kvsched.cli",
    "reports.cli",
    "kvsched.sweep",
    "kvsched.tune",
    "workloads.cli",
    "kvsched.validate",
    "kvsched.engine_cli",
]
# The module that registers each subcommand, so that a command line naming one imports only that
# module (`kvsched report` skips the simulator, policies and sweeps: about 0.2 s of CPU).
# A command missing here still works: then every module is imported.
COMMAND_MODULE = {
    "run": "kvsched.cli",
    "report": "reports.cli",
    "compare": "reports.cli",
    "check": "reports.cli",
    "timeline": "reports.cli",
    "sweep": "kvsched.sweep",
    "tune": "kvsched.tune",
    "trace": "workloads.cli",
    "validate": "kvsched.validate",
    "engine": "kvsched.engine_cli",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (given a known `command`) just that subcommand's parser."""
    p = _Parser(prog="kvsched", description="KV-cache scheduling what-if simulator")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    known = COMMAND_MODULE.get(command or "")
    for name in [known] if known else COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _register_kernels(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in KERNEL_COMMANDS:
        return run_guarded(lambda: _run_kernel_tool(argv[0], argv[1:]))
    return run_guarded(lambda: _dispatch(argv))


def _dispatch(argv: list[str]) -> int:
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
