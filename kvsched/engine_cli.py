"""`kvsched engine run --config FILE --out DIR [--graphs [none|decode|all]]`: serve a workload on the GPU engine.

The same scheduler and KV cache as `kvsched run`, with each step executed by engine/ on the GPU
(torch and triton needed; `torchrun --nproc-per-node 2 -m kvsched.engine_run ...` for TP 2).
The run directory has the simulator's schema plus measured steps: `kvsched validate DIR`.
"""

from __future__ import annotations

from pathlib import Path

from sim.config import ConfigError


def cmd_engine_run(args) -> int:
    try:
        from kvsched import engine_run
    except ImportError as err:
        raise ConfigError(
            f"engine run: needs the kernels extra (torch, triton): pip install 'kvsched[kernels]' "
            f"({err})"
        ) from None
    out = Path(args.out)
    stem = Path(args.config).stem
    if out.name != stem:  # engine_run writes <out-root>/<config stem>
        raise ConfigError(f"--out: name the run directory after the config ({out.parent / stem})")
    argv = ["--config", args.config, "--out-root", str(out.parent)]
    argv += ["--graphs", args.graphs]
    argv += ["--no-warmup"] if args.no_warmup else []
    engine_run.main(argv)
    return 0


def add_graphs_option(parser) -> None:
    """`--graphs [none|decode|all]`, shared by `kvsched engine run` and `kvsched.engine_run`."""
    parser.add_argument(
        "--graphs",
        choices=["none", "decode", "all"],
        default="none",
        const="all",
        nargs="?",
        help="CUDA graphs: none, decode-only steps, or all (decode-only steps whole, other "
        "steps up to 512 tokens piecewise around attention); --graphs alone means all",
    )


def register(sub) -> None:
    engine = sub.add_parser("engine", help="serve on the GPU engine (same scheduler and cache)")
    verbs = engine.add_subparsers(dest="engine_command", required=True)
    run = verbs.add_parser("run", help="serve a config's workload with real GPU steps")
    run.add_argument("--config", required=True, help="YAML or JSON experiment config (one node)")
    run.add_argument("--out", required=True, help="run directory: <dir>/<config stem>")
    add_graphs_option(run)
    run.add_argument("--no-warmup", action="store_true", help="skip the warm-up (CPU smoke runs)")
    run.set_defaults(func=cmd_engine_run)
