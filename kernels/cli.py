"""Entry points for the `kvsched bench` and `kvsched calibrate` subcommands.

Both need a CUDA GPU and return exit code 2 without one; torch and triton are imported only
when a subcommand runs, so `kvsched` itself starts without them.
"""

from __future__ import annotations


def bench_main(argv: list[str] | None = None) -> int:
    """`kvsched bench [--out FILE] [--tune] [--quick]`: the paged decode micro-benchmark."""
    from kernels.bench import main

    return main(argv)


def calibrate_main(argv: list[str] | None = None) -> int:
    """`kvsched calibrate [--targets M:TP,...] [--out FILE] [--fidelity N]`: latency tables."""
    from kernels.calibrate import main

    return main(argv)
