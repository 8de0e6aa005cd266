"""The simulator's hot modules compiled to C by mypyc, used only while they match their sources.

`make setup` (scripts/build_native.py) compiles the modules in `COMPILED` with mypyc: each gets a
`.so` beside its `.py`, plus one shared library (moved into `sim/`), and `sim/native.json`
records the SHA-256 of every source compiled. The same build compiles the C extensions in
`C_EXTENSIONS` (the routing table's probe loops, `sim/_holders.c`; the prefix index's level 1,
`sim/_slots.c`; the chained page keys' loop, `sim/_pagekeys.c`; the token copy's page loops,
`sim/_pagetokens.c`), recorded and used with them.
An extension module shadows the source beside it, so a source edited since would be ignored
silently. `import sim` therefore checks the record first. If any compiled source has changed
since (or the record is missing, or `KVSCHED_PURE=1` is set), every module in `COMPILED` is
loaded from its source instead, and no C extension is used. It has to be all of them: a compiled
module only accepts the compiled classes of the others.

Compiled and pure runs give byte-identical results: the same source, the same float operations
in the same order (tests/sim/test_native.py compares their run files). The compiled code also
checks the annotated types at run time. Python versions without the build (the GPU machines'
3.12) load the sources.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

# Ordered by dependency, for readers; mypyc compiles them as one group.
COMPILED = (
    "sim.steps",
    "sim.clock",
    "sim.kv.page_pool",
    "sim.kv.manager",
    "sim.latency.calibrated",
    "sim.executor",
    "sim.scheduler",
    "sim.node",
    "sim.router",
)
# Written in C (CPython's API), built beside them and recorded with them: used only together.
C_EXTENSIONS = ("sim._holders", "sim._slots", "sim._pagekeys", "sim._pagetokens")
ROOT = Path(__file__).resolve().parent.parent
RECORD = Path(__file__).with_name("native.json")
PURE_ENV = "KVSCHED_PURE"

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:

    def mypyc_attr(*_args, **_kwargs):
        """mypyc's class options (read when compiling); a no-op when interpreted."""
        return lambda cls: cls


def source_of(module: str) -> Path:
    suffix = ".c" if module in C_EXTENSIONS else ".py"
    return ROOT.joinpath(*module.split(".")).with_suffix(suffix)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def built_of(module: str) -> Path:
    """The module's extension for this interpreter (mypyc's build names it so)."""
    return source_of(module).with_suffix(importlib.machinery.EXTENSION_SUFFIXES[0])


def read_record() -> dict | None:
    """The build's record: {"sources": {module: SHA-256}, "shared": the shared library's
    module name}, if every compiled module is built for this interpreter from the source
    beside it (and KVSCHED_PURE is not set); else None."""
    if os.environ.get(PURE_ENV, "") not in ("", "0") or not RECORD.exists():
        return None
    try:
        record = json.loads(RECORD.read_text())
        sources, shared = record["sources"], record["shared"]
        current = all(
            sources.get(m) == digest(source_of(m)) and built_of(m).exists()
            for m in COMPILED + C_EXTENSIONS
        )
        return record if current and shared_of(shared).exists() else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def shared_of(name: str) -> Path:
    """mypyc's shared library of the group (moved into this package by the build)."""
    return Path(__file__).with_name(name + importlib.machinery.EXTENSION_SUFFIXES[0])


def _load_shared(name: str) -> None:
    """The compiled modules import their shared library by its top-level name: load it from
    this package first (the repository root, where mypyc writes it, is not on sys.path)."""
    if name in sys.modules:
        return
    path = str(shared_of(name))
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)


class _SourcesFirst(importlib.abc.MetaPathFinder):
    """Loads the compiled modules from their `.py` sources, ignoring the `.so` beside them."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in COMPILED:
            return None
        source = str(source_of(fullname))
        loader = importlib.machinery.SourceFileLoader(fullname, source)
        return importlib.util.spec_from_file_location(fullname, source, loader=loader)


_IN_USE = False  # set by use_sources_unless_current


def c_extension(name: str):
    """The C extension `name` (one of C_EXTENSIONS) if the build is in use, else None."""
    assert name in C_EXTENSIONS
    return importlib.import_module(name) if _IN_USE else None


def use_sources_unless_current() -> bool:
    """Called by `import sim` before any compiled module is imported: True if the compiled
    modules will be used."""
    global _IN_USE
    record = read_record()
    if record is not None:
        _load_shared(record["shared"])
        _IN_USE = True
        return True
    if not any(isinstance(f, _SourcesFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourcesFirst())
    return False
