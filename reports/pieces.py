"""The costly pieces of a report (one per figure or group of figures), built on several cores.

Each piece is a call that returns picklable HTML parts. Building a matplotlib figure is nearly
all of a report's time and pieces share nothing, so they are spread over forked workers: a fork
inherits the loaded runs and the imported modules, so a worker starts in milliseconds and only
the HTML comes back. Each piece's text depends on its own inputs alone (figure ids are salted by
figure key), so the page is byte-identical whatever the number of workers.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

from reports.figures import style

MAX_WORKERS = 4  # past this, forking and the uneven sizes of the pieces eat the gain

Piece = Callable[[], Any]
_pieces: list[Piece] = []  # what forked workers read (set only while a pool runs)


def default_workers() -> int:
    """The idle cores this process may use (its own counted as idle), up to MAX_WORKERS; 1
    where a worker cannot be forked (no fork on the platform, or this process is itself a
    daemonic worker). On a busy machine more workers only queue for the same cores: measured
    on 2 cores at load 3-5, two workers took 15-30% more CPU than one for no shorter wall time."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    if multiprocessing.current_process().daemon:
        return 1
    cores = len(os.sched_getaffinity(0))
    idle = int(cores + 1 - os.getloadavg()[0])  # 1-minute load average
    return max(1, min(MAX_WORKERS, cores, idle))


def build(pieces: dict[str, Piece], workers: int | None = None) -> dict[str, Any]:
    """Every piece's result by key. Pieces are handed out in the order given (put the costly
    ones first): each worker takes the next piece when it finishes one."""
    n = min(default_workers() if workers is None else workers, len(pieces))
    calls = list(pieces.values())
    # One style() around them all: besides each piece's own, so that text layouts measured in
    # one piece serve the next (a fork inherits them; reports/text_layout.py).
    with _objects_frozen(), style():
        if n <= 1:
            return dict(zip(pieces, [_run(call) for call in calls], strict=True))
        global _pieces
        _pieces = calls
        pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
        try:
            results = list(pool.map(_run_index, range(len(calls))))
        finally:  # interrupted (a signal, a failed piece): drop the pieces not yet started
            pool.shutdown(wait=True, cancel_futures=True)
            _pieces = []
    return dict(zip(pieces, results, strict=True))


def _run(call: Piece) -> Any:
    with style():
        return call()


def _run_index(i: int) -> Any:  # in a forked worker
    return _run(_pieces[i])


@contextmanager
def _objects_frozen() -> Iterator[None]:
    """Objects alive before the report (modules, the loaded runs) are left out of the garbage
    collector's full scans while it renders: matplotlib makes enough short-lived cycles to
    trigger two per render, each walking every object of the process (0.2 s of a 3.5 s render
    on the default study; 0.1 s frozen). In a forked worker this also keeps the collector from
    writing to, and so copying, the pages it shares with its parent."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
