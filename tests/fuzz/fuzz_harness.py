"""The fuzz suite's one contract check (docs/cli.md), run in-process through kvsched.cli.main.

A case runs one command line inside a scratch directory that also holds the user's files, and
asserts: the exit status is allowed (0 or 2 unless the case says otherwise), no traceback, an
error is one line, every user file is still there with its bytes, and nothing partial is left
(no `*.partial`, no `*.kvsched-lock`, no `*.tmp`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
from pathlib import Path

from kvsched.cli import main
from kvsched.outdir import LOCK_SUFFIX, PARTIAL_SUFFIX

TINY = {
    "name": "tiny",
    "seed": 1,
    "duration_s": 2,
    "model": "llama-3-8b",
    "node": {"num_gpus": 1, "tp": 1},
    "cluster": {"num_nodes": 1},
    "workload": {
        "name": "seed",
        "params": {
            "num_clients": 2,
            "input_min": 16,
            "input_max": 64,
            "long_share": 0.0,
            "system_prompt_tokens": 16,
            "output_min": 2,
            "output_max": 4,
        },
    },
}

USER_FILES = {
    "mine/notes.txt": b"my notes\n",
    "mine/summary.json": b"{}\n",  # looks like a run, is not one
    "keep.partial/data.bin": b"\x00\x01",  # a user's own folder with kvsched's suffix
    "plain.txt": b"hello\n",
}


def make_user_files(root: Path) -> dict[str, str]:
    for rel, data in USER_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return snapshot(root)


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every regular file under root."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def leftovers(root: Path) -> list[str]:
    """Partial output kvsched must never leave behind."""
    bad = []
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            rel = str((Path(dirpath) / name).relative_to(root))
            if rel.startswith("keep.partial"):
                continue  # the user's own
            if name.endswith((PARTIAL_SUFFIX, LOCK_SUFFIX, ".tmp")):
                bad.append(rel)
    return bad


def run_cli(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """(exit status, stdout, stderr); stderr also holds what child processes (a run's arm
    workers) wrote to file descriptor 2, which sys.stderr's redirection does not see."""
    err, out = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with (
            _fd2_captured() as fd2,
            contextlib.redirect_stderr(err),
            contextlib.redirect_stdout(out),
        ):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse --help
                code = exc.code if isinstance(exc.code, int) else 0
    finally:
        os.chdir(old)
    return code, out.getvalue(), err.getvalue() + "".join(fd2)


@contextlib.contextmanager
def _fd2_captured():
    """File descriptor 2 pointed at a temporary file while inside; what it received is in the
    yielded list after."""
    written: list[str] = []
    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        try:
            yield written
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            written.append(capture.read().decode(errors="replace"))


def check_case(
    argv: list[str], root: Path, allowed: tuple[int, ...] = (0, 2), user: dict | None = None
) -> tuple[int, str]:
    """Run argv in root; assert the contract; the exit status and stderr."""
    before = user if user is not None else snapshot(root)
    code, _, err = run_cli(argv, root)
    assert code in allowed, (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        assert err.startswith("error: ") or err.startswith("usage:"), (argv, err)
        assert err.startswith("usage:") or err.count("\n") == 1, (argv, err)
    after = snapshot(root)
    lost = {k for k, h in before.items() if after.get(k) != h and not _ours(k)}
    assert not lost, (argv, "user files lost or changed", lost)
    assert not leftovers(root), (argv, leftovers(root))
    return code, err


def _ours(rel: str) -> bool:
    """Files a kvsched command may rewrite: inside directories it marked (outputs)."""
    parts = Path(rel).parts
    return parts[0].startswith(("out", "sweep", "tune", "report", "cmp"))
