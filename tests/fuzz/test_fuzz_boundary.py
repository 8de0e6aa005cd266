"""The CLI's one error boundary: expected failures are one line and exit 2, the rest are bugs."""

from __future__ import annotations

import errno

import pytest

from kvsched.boundary import Terminated, run_guarded
from sim.config import ConfigError


def _raise(err: BaseException):
    def command() -> int:
        raise err

    return command


@pytest.mark.parametrize(
    "err,text",
    [
        (ConfigError("config: seed: bad\nsecond line"), "error: config: seed: bad second line"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/y"), "/x/y: No such"),
        (PermissionError(errno.EACCES, "Permission denied", "/ro/out"), "/ro/out: Permission"),
        (OSError(errno.ENAMETOOLONG, "File name too long", "a" * 300), "File name too long"),
        (OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"), "/a -> /b"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), "not UTF-8"),
        (MemoryError(), "out of memory"),
    ],
)
def test_expected_failures_are_one_line_exit_2(capsys, err, text):
    assert run_guarded(_raise(err)) == 2
    out = capsys.readouterr()
    assert out.out == "" and text in out.err and out.err.count("\n") == 1


@pytest.mark.parametrize("err", [RuntimeError("bug"), KeyError("k"), AssertionError(), TypeError()])
def test_everything_else_stays_a_bug(err):
    with pytest.raises(type(err)):
        run_guarded(_raise(err))


@pytest.mark.parametrize("signum,status", [(15, 143), (1, 129)])
def test_terminated_exits_128_plus_signal(capsys, signum, status):
    assert run_guarded(_raise(Terminated(signum))) == status
    assert capsys.readouterr().err.startswith("interrupted by SIG")


def test_terminated_survives_a_copy_from_its_args():
    """SimPy re-raises a process's exception as type(err)(*err.args)."""
    err = Terminated(15)
    copy = type(err)(*err.args)
    assert copy.signum == 15 and str(copy) == "SIGTERM"
