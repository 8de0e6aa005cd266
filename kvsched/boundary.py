"""The CLI's one error boundary and its signal handling (docs/cli.md).

- A user error (ConfigError) or an unusable file or place (OSError, UnicodeDecodeError) or a
  machine too small for the input (MemoryError) ends the command with exit status 2 and one line
  on stderr. Every other exception is a bug in kvsched and keeps its traceback.
- SIGINT, SIGTERM and SIGHUP unwind the command like Ctrl-C: whatever it was writing is cleaned
  up (a run's `.partial`, its lock), and it exits 128 + the signal number.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from sim.config import ConfigError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, so clean-up runs as for Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signum)  # args = (signum,): SimPy re-raises a copy made from args
        self.signum = signum

    def __str__(self) -> str:
        return signal.Signals(self.signum).name


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """SIGTERM/SIGHUP raise Terminated (SIGINT already raises KeyboardInterrupt) while inside."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def os_error_text(err: OSError) -> str:
    reason = err.strerror or type(err).__name__
    if err.filename is None:
        return str(err) or reason
    names = [str(err.filename)] + ([str(err.filename2)] if err.filename2 else [])
    return f"{' -> '.join(names)}: {reason}"


def run_guarded(command: Callable[[], int]) -> int:
    """Run a command; the exit status, with every expected failure as one line on stderr."""
    try:
        with stop_signals_raise():
            return command()
    except ConfigError as err:
        return _fail(str(err))
    except OSError as err:
        return _fail(os_error_text(err))
    except UnicodeDecodeError as err:
        return _fail(f"an input file is not UTF-8 text ({err.reason} at byte {err.start})")
    except MemoryError:
        return _fail("out of memory: the input is too large for this machine (docs/cli.md)")
    except KeyboardInterrupt as err:
        signum = getattr(err, "signum", signal.SIGINT)
        print(f"interrupted by {signal.Signals(signum).name}", file=sys.stderr)
        return 128 + signum


def _fail(message: str) -> int:
    line = " ".join(message.split())  # one line, whatever the message held
    print(f"error: {line}", file=sys.stderr)
    return 2


def finite_float(text: str) -> float:
    """argparse type: a finite number (not nan, inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value
