"""The host's speed while the engine serves, timed on a fixed piece of pure-Python work.

The serving machine's CPU does not run at one speed: on the H200 VM of session 11 (2026-12-01)
a fixed pure-Python workload took 1.5-2x as long for seconds at a time, unpinned or pinned
(engine/runs/logs/2026-12-01_host_speed/), and every step's host part (planning, applying,
preparing inputs) with it. The simulator prices host work at one speed, so a validation must
know what speed each step ran at: the serving loop times `probe_work` every `INTERVAL_S`, inline
(the speed that matters is the loop's own thread's), and writes the samples to host_speed.csv
(`kvsched validate --host-speed` reads them). One probe costs 25-35 us on the H200 host (~0.15%
of the loop at the default interval), inside `loop_s`.
"""

from __future__ import annotations

import time

INTERVAL_S = 0.02
PROBE_COLUMNS = ["t_s", "probe_s"]


def probe_work() -> int:
    """A fixed piece of interpreter work like the scheduler's: dict and list traffic, integer
    arithmetic, attribute-free calls (25-35 us on the H200 VM's host, 2026-12-01)."""
    table: dict[int, int] = {}
    total = 0
    for i in range(200):
        table[i & 63] = table.get(i & 63, 0) + i
        total += (i * 7) % 13
    return total + len(table)


class HostProbe:
    """Samples of (run time s, seconds one `probe_work` took), at most one per INTERVAL_S."""

    def __init__(self, interval_s: float = INTERVAL_S):
        self.interval_s = interval_s
        self.rows: list[tuple[float, float]] = []
        self._next = 0.0

    def maybe(self, now: float) -> None:
        if now < self._next:
            return
        t = time.perf_counter()
        probe_work()
        self.rows.append((now, time.perf_counter() - t))
        self._next = now + self.interval_s
