"""The output-directory contract (docs/cli.md): what kvsched may create, lock, replace and delete.

- Every directory kvsched creates carries a marker file, MARKER, naming what it is (`run`,
  `sweep`, or `parent` for a missing parent of --out made on the way).
- kvsched replaces or deletes only a directory whose marker says it is the same kind of output
  (a run replaces a run); an empty directory may be filled; anything else is refused (exit 2).
  A `<out>.partial` directory is deleted only if it carries the marker.
- While an output is written, `<out>.kvsched-lock` next to it is held (flock); a second writer
  exits 2 at once with one line naming the holder's pid. The lock file is removed at the end.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

from sim import __version__
from sim.config import ConfigError
from sim.rundir import MARKER, marker_text

LOCK_SUFFIX = ".kvsched-lock"
PARTIAL_SUFFIX = ".partial"


def marker_kind(directory: Path) -> str | None:
    """The kind the directory's marker names, or None if it has no (readable) marker."""
    try:
        data = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data.get("kind") if isinstance(data, dict) else None


def write_marker(directory: Path, kind: str) -> None:
    (directory / MARKER).write_text(marker_text(kind, __version__))


def make_dir(path: Path, kind: str) -> list[Path]:
    """Create `path` (marked `kind`) and its missing parents (marked `parent`); the directories
    created, outermost first, so a failed command can remove the ones it left empty."""
    missing = []
    for p in [path, *path.parents]:
        if p.exists():
            break
        missing.append(p)
    created = []
    for p in reversed(missing):
        p.mkdir()
        created.append(p)
        write_marker(p, kind if p == path else "parent")
    return created


def ensure_dir(path: Path, kind: str, flag: str = "--out") -> list[Path]:
    """A directory to keep results in (a sweep's): absent (created), empty (marked) or marked
    `kind` already; the directories created, as make_dir."""
    check_writable(path, kind, flag)
    if not path.exists():
        return make_dir(path, kind)
    if marker_kind(path) is None:
        write_marker(path, kind)
    return []


def remove_created(created: list[Path]) -> None:
    """Remove directories this command created that hold nothing but their marker."""
    for p in reversed(created):
        with contextlib.suppress(OSError):
            (p / MARKER).unlink()
            p.rmdir()


def check_writable(path: Path, kind: str, flag: str = "--out") -> None:
    """`path` may be absent, an empty directory, or a directory kvsched made as a `kind`."""
    if path.parent == path:
        raise ConfigError(f"{flag}: {path} is the filesystem root")
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_dir() or path.is_symlink():
        raise ConfigError(f"{flag}: {path} exists and is not a directory")
    if not any(path.iterdir()):
        return
    found = marker_kind(path)
    if found == kind:
        return
    found_text = f"a kvsched {found} directory" if found else f"no {MARKER} marker"
    hint = "choose a new path"
    made_by_us = any((path / n).is_file() for n in ("run_info.json", "sweep.json"))
    if found is None and made_by_us:  # a run or sweep from before the markers
        hint += f', or mark it as yours to replace: echo \'{{"kind": "{kind}"}}\' > {path / MARKER}'
    raise ConfigError(
        f"{flag}: {path} exists and is not a kvsched {kind} directory ({found_text}); "
        f"kvsched never replaces it: {hint}"
    )


def clear_partial(partial: Path, flag: str = "--out") -> None:
    """Delete a `.partial` left by an earlier crash, only if kvsched made it."""
    if not partial.exists() and not partial.is_symlink():
        return
    if partial.is_dir() and not partial.is_symlink() and marker_kind(partial) is not None:
        shutil.rmtree(partial)
        return
    raise ConfigError(
        f"{flag}: {partial} exists and was not created by kvsched; move it away first"
    )


@contextlib.contextmanager
def output_lock(path: Path, flag: str = "--out") -> Iterator[None]:
    """Hold `<path>.kvsched-lock` (the parent must exist); a second holder gets a ConfigError."""
    lock = path.with_name(path.name + LOCK_SUFFIX)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise ConfigError(f"{flag}: cannot write {path}: {err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise ConfigError(
                f"{flag}: {path} is being written by another kvsched ({_holder(lock)}); "
                "wait for it to finish or choose another path"
            ) from None
        # The holder before us may have unlinked the file between our open and our lock.
        if _same_file(fd, lock):
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _holder(lock: Path) -> str:
    try:
        pid = lock.read_text().strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "lock held"


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Defer SIGINT/SIGTERM/SIGHUP across a few renames, so the swap is never cut in half."""
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def replace_dir(partial: Path, out: Path) -> None:
    """Put the finished `partial` in place of `out` (checked by check_writable: absent, empty or
    a marked directory of the same kind), with the signals deferred so no half-swap is left."""
    with signals_blocked():
        if out.exists():
            shutil.rmtree(out)
        partial.rename(out)
