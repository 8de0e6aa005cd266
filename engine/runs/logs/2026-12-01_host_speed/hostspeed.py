"""The device VM's host speed over time: a fixed pure-Python workload (~1 ms) timed back to
back, with the vCPU it ran on and the VM's /proc/stat deltas every 0.1 s; unpinned (25 s),
pinned to one vCPU (15 s), then on every vCPU at once, one process each (15 s). No GPU work.

    SECS=0.6 python3 hostspeed.py OUT_DIR     (durations scaled by SECS; session 11 used 0.6)

Writes OUT_DIR/hostspeed.json ({"info", "unpinned", "pinned2", "all": {cpuN: rows}}, rows
[t, us, vcpu(, stat deltas)]) and prints each series' p10 / p50 / p90 in us.
"""

import json
import multiprocessing as mp
import os
import sys
import time


def work() -> int:
    total = 0
    for i in range(20000):
        total += i * i
    return total


def stat_cpu() -> list[int]:
    with open("/proc/stat") as f:  # user nice system idle iowait irq softirq steal ...
        return [int(x) for x in f.readline().split()[1:]]


def cpu_now() -> int:
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def loop(seconds: float, pin: int | None = None, tag: str = "") -> tuple[str, list]:
    if pin is not None:
        os.sched_setaffinity(0, {pin})
    rows: list = []
    t_end = time.perf_counter() + seconds
    last, stat = time.perf_counter(), stat_cpu()
    while time.perf_counter() < t_end:
        t = time.perf_counter()
        work()
        row: list = [round(t, 4), round((time.perf_counter() - t) * 1e6, 1), cpu_now()]
        if t - last > 0.1:
            now_stat = stat_cpu()
            row.append([b - a for a, b in zip(stat, now_stat, strict=True)])
            stat, last = now_stat, t
        rows.append(row)
    return tag, rows


def pinned(args: tuple) -> tuple[str, list]:
    return loop(*args)


def quantiles(rows: list) -> list[float]:
    d = sorted(r[1] for r in rows)
    return [d[len(d) // 10], d[len(d) // 2], d[9 * len(d) // 10]]


def main(out_dir: str) -> None:
    scale = float(os.environ.get("SECS", "1"))
    n = os.cpu_count() or 1
    info: dict = {"nproc": n, "affinity": sorted(os.sched_getaffinity(0))}
    for path in ["/proc/cpuinfo", "/sys/fs/cgroup/cpu.max", "/proc/loadavg"]:
        try:
            with open(path) as f:
                info[path] = f.read()[:3000]
        except OSError as e:
            info[path] = str(e)
    res: dict = {"info": info}
    res["unpinned"] = loop(25 * scale, None, "unpinned")[1]
    res["pinned2"] = loop(15 * scale, min(2, n - 1), "pin2")[1]
    with mp.Pool(n) as pool:
        res["all"] = dict(pool.map(pinned, [(15 * scale, c, f"cpu{c}") for c in range(n)]))
    with open(os.path.join(out_dir, "hostspeed.json"), "w") as f:
        json.dump(res, f)
    for key in ("unpinned", "pinned2"):
        print(key, len(res[key]), "p10/p50/p90 us", *quantiles(res[key]))
    for cpu, rows in res["all"].items():
        print(cpu, len(rows), *quantiles(rows))


if __name__ == "__main__":
    main(sys.argv[1])
