"""Compile the simulator's hot modules with mypyc (sim/native.py says what and why).

    python scripts/build_native.py          # build in place, record the sources compiled
    python scripts/build_native.py --clean  # remove what a build wrote

A failed build leaves the pure-Python sources in use and says so (exit 0): a machine without a
C compiler still runs everything, only slower.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.native import C_EXTENSIONS, COMPILED, RECORD, built_of, digest, shared_of, source_of  # noqa: E402


def written() -> list[Path]:
    """What a build writes: each module's extension, the shared library, the record."""
    shared = sorted(ROOT.glob("*__mypyc.*.so")) + sorted(RECORD.parent.glob("*__mypyc.*.so"))
    return [built_of(m) for m in COMPILED + C_EXTENSIONS] + shared + [RECORD]


def clean() -> None:
    """What a build wrote (mypyc's C files stay in build/, which it reuses)."""
    for path in written():
        path.unlink(missing_ok=True)


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    """A build step; a compiler that cannot be started is a failed step, not a traceback."""
    try:
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    except OSError as error:
        return subprocess.CompletedProcess(cmd, 1, "", f"{cmd[0]}: {error}")


def c_build(module: str) -> list[str]:
    """The compiler command for a C extension, with this interpreter's headers and flags."""
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
    if not compiler or shutil.which(compiler[0]) is None:  # the interpreter's build machine's CC
        compiler = ["cc"]
    include = sysconfig.get_paths()["include"]
    out = str(built_of(module))
    return [*compiler, "-O2", "-shared", "-fPIC", f"-I{include}", str(source_of(module)), "-o", out]


def build() -> int:
    clean()
    sources = [str(source_of(m).relative_to(ROOT)) for m in COMPILED]
    modules = COMPILED + C_EXTENSIONS
    record = {m: digest(source_of(m)) for m in modules}  # read before: what is compiled
    cmd = [sys.executable, "-m", "mypyc", *sources]
    done = run(cmd)
    for module in C_EXTENSIONS if done.returncode == 0 else ():
        done = run(c_build(module))
        if done.returncode != 0:
            break
    if done.returncode != 0:
        clean()
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        print("native build failed; the pure-Python sources stay in use:", *tail, sep="\n  ")
        return 0
    (shared,) = ROOT.glob("*__mypyc.*.so")  # one group: one shared library
    name = shared.name.split(".")[0]
    shared.replace(shared_of(name))
    RECORD.write_text(json.dumps({"sources": record, "shared": name}, indent=1) + "\n")
    print(
        f"compiled {len(COMPILED)} modules with mypyc and {len(C_EXTENSIONS)} C extensions "
        f"({RECORD.relative_to(ROOT)})"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove what a build wrote")
    if parser.parse_args().clean:
        clean()
        return 0
    return build()


if __name__ == "__main__":
    sys.exit(main())
