"""Files that `kvsched report`, `compare --out` and `check --update` write where the user points.

A file is written whole: to a temporary name beside it, then renamed over the target, so an
interrupted write never leaves half a file. An existing file is replaced only if kvsched wrote
it (its text carries `signature`), so a mistyped --out never overwrites a user's file. Missing
parent directories are created with kvsched's marker (docs/cli.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from sim import __version__
from sim.config import ConfigError
from sim.rundir import MARKER, marker_text

SIGNATURE_BYTES = 4096  # where a signature must appear (the head of an HTML page)


def check_output(path: Path, flag: str, signature: str | None) -> None:
    """Fail before any work if `path` cannot be written or is someone else's file."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{flag}: {path} is a directory; give a file name")
    if (
        signature is not None
        and (path.exists() or path.is_symlink())
        and not _signed(path, signature)
    ):
        raise ConfigError(
            f"{flag}: {path} exists and was not written by kvsched; choose a new path"
        )
    above = next((p for p in path.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise ConfigError(f"{flag}: {above} is not a directory")


def write_output(path: Path, text: str, flag: str, signature: str | None) -> Path:
    path = Path(path)
    check_output(path, flag, signature)
    _make_parents(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _signed(path: Path, signature: str) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(SIGNATURE_BYTES)
    except OSError:
        return False
    return signature.encode() in head


def _make_parents(directory: Path) -> None:
    missing = []
    for p in [directory, *directory.parents]:
        if p.exists():
            break
        missing.append(p)
    for p in reversed(missing):
        p.mkdir()
        (p / MARKER).write_text(marker_text("parent", __version__))
