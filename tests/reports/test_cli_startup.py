"""`kvsched report` imports only what a report needs: the command table that makes it so matches
what each command module registers."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from kvsched.cli import COMMAND_MODULE, COMMAND_MODULES


def _registered(module: str) -> set[str]:
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(module).register(sub)
    return set(sub.choices)


def test_command_table_matches_the_registering_modules():
    registered = {cmd: mod for mod in COMMAND_MODULES for cmd in _registered(mod)}
    assert registered == COMMAND_MODULE


def test_report_command_skips_the_simulator_and_sweeps():
    code = (
        "import sys; from kvsched.cli import build_parser; "
        "build_parser('report').parse_args(['report', 'RUN', '--out', 'r.html']); "
        "print(sorted(m for m in ('sim.cluster', 'kvsched.sweep', 'kvsched.validate', "
        "'policies') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
