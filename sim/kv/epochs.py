"""Epochs of one node's batch steps, for epoch-based page reclamation.

Epoch e = the number of batch steps finished so far. The readers of step e (its kernels, or a copy
that outlives it) exit at `exit_s(e)`; epoch 0 has no readers. A page released in epoch e was
read only by steps <= e, so it is safe to reuse once every one of those readers has exited. The
pool's normal path also waits for one whole step after e (the article's rule); under memory
pressure the scheduler may take a page as soon as its readers have exited (a fence, not a guess).
"""

from __future__ import annotations

import bisect
from array import array
from struct import pack

import numpy as np


class Epochs:
    def __init__(self):
        self.epoch = 0
        # exit time of the readers of step e, at index e (monotone); 8 bytes a step
        self._exit_s = array("d", [-np.inf])

    def finish_step(self, readers_exit_s: float) -> None:
        """A step finished; its readers exit at readers_exit_s (never before an earlier step's)."""
        self.epoch += 1
        self._exit_s.append(max(readers_exit_s, self._exit_s[-1]))

    def finish_steps(self, readers_exit_s: list[float]) -> None:
        """`finish_step` for each of these, in order."""
        exits, last = self._exit_s, self._exit_s[-1]
        if readers_exit_s and readers_exit_s[0] >= last:  # clock times: already non-decreasing
            # the same doubles as exits.extend(readers_exit_s), packed in one C pass (extend
            # parses each float on its own: a decode span's sync hands dozens)
            exits.frombytes(pack(f"{len(readers_exit_s)}d", *readers_exit_s))
        else:
            for exit_s in readers_exit_s:
                last = max(exit_s, last)
                exits.append(last)
        self.epoch += len(readers_exit_s)

    def exit_s(self, epoch: int) -> float:
        """When the readers of every step up to `epoch` have exited."""
        return self._exit_s[epoch]

    def last_exited(self, now: float) -> int:
        """The latest epoch whose readers (and every earlier step's) have all exited by `now`."""
        return bisect.bisect_right(self._exit_s, now) - 1

    def safe(self, release_epochs: np.ndarray, now: float) -> np.ndarray:
        """bool per page released in these epochs: may it be reused at `now`?"""
        return release_epochs <= self.last_exited(now)
