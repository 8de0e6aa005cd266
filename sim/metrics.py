"""Metric recording: per-request rows, per-node time series, and the run summary.

Metric names follow the serving benchmarks people already use (vLLM's benchmark_serving:
`request_throughput`, `output_throughput`, `p99_ttft_ms`, ...), plus the cache's own.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from sim.kv.protocol import CacheCounters
from sim.request_log import RequestLog
from sim.sequence import Sequence, Status
from sim.views import node_load

if TYPE_CHECKING:
    from sim.cluster import Cluster
    from sim.config import ExperimentConfig

REQUEST_COLUMNS = [
    "request_id",
    "arm",
    "node",
    "tag",
    "arrival_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "cached_tokens",
    "output_tokens",
    "preemptions",
    "false_hits",
    "wrong_reuse_tokens",
    "status",
    "routed_s",
    "use_after_free",
    "scheduled_s",  # first admitted into a step (its first prefill chunk starts)
    "queued_step",  # index of the first step its node planned with it queued (exact replays)
]
SERIES_COLUMNS = [
    "time_s",
    "node",
    "kv_capacity_bytes",
    "kv_pool_bytes",
    "kv_allocated_bytes",
    "kv_live_bytes",
    "kv_cached_bytes",
    "kv_retired_bytes",
    "kv_fragmentation_bytes",
    "waiting",
    "running",
    "load",
    # KV cache engine (sim/kv/): counts are cumulative per node, the rest are gauges
    "kv_internal_frag_bytes",
    "index_overhead_bytes",
    "protected_pages",
    "evicted_pages",
    "use_after_free",
]


# timeseries.csv's float columns; the others hold ints
_FLOAT_SERIES = frozenset({"time_s", "load"})


class Recorder:
    """The per-node samples, kept a column at a time in typed arrays: 8 bytes a value, where a
    tuple a row with its boxed values took ~540 bytes a row (~80 MB at 256 nodes x 600 s)."""

    def __init__(self, cfg: ExperimentConfig):
        self.cfg = cfg
        self.columns: list[array | list] = [
            array("d" if name in _FLOAT_SERIES else "q") for name in SERIES_COLUMNS
        ]

    def sample_loop(self, env, cluster: Cluster):
        while True:
            self.sample(env.now, cluster)
            yield env.timeout(self.cfg.sample_interval_s)

    def sample(self, now: float, cluster: Cluster) -> None:
        for node in cluster.nodes:
            u, counters = node.kv_usage()  # a node's decode span not brought up to date
            tb = cluster.token_bytes
            load = node_load(
                u.allocated_bytes // tb,
                node.waiting_prompt_tokens,
                u.capacity_bytes // tb,
                node.num_waiting + node.num_running,
                node.cfg.max_num_seqs,
            )
            self._append(
                (
                    now,
                    node.node_id,
                    u.capacity_bytes,
                    u.pool_bytes,
                    u.allocated_bytes,
                    u.live_bytes,
                    u.cached_bytes,
                    u.retired_bytes,
                    u.fragmentation_bytes,
                    node.num_waiting,
                    node.num_running,
                    load,
                    u.internal_frag_bytes,
                    u.index_bytes,
                    *_sampled_counters(counters),
                )
            )

    def _append(self, row: tuple) -> None:
        columns = self.columns
        for i, value in enumerate(row):
            try:
                columns[i].append(value)
            except (TypeError, OverflowError):  # a value its array cannot hold: a list from now on
                columns[i] = [*columns[i], value]

    def series(self) -> pd.DataFrame:
        """timeseries.csv: the frame pandas would build from one tuple per row (typed arrays
        give int64 and float64 columns, as ints and floats do; a column that became a list is
        left to pandas' inference)."""
        if not len(self.columns[0]):  # no samples: pandas' own empty columns
            return pd.DataFrame([], columns=SERIES_COLUMNS)
        data = {  # copies: the arrays may grow on (a buffer exported blocks their resizing)
            name: np.array(c, dtype=np.float64 if c.typecode == "d" else np.int64)
            if isinstance(c, array)
            else c
            for name, c in zip(SERIES_COLUMNS, self.columns, strict=True)
        }
        return pd.DataFrame(data, columns=SERIES_COLUMNS)


# requests.csv's columns after `arm`: each the attribute path read from a request, and its
# dtype (None: text). Built a column at a time, with no row tuples in between: at 256 nodes the
# ~117,000 rows of boxed values were ~100 MB at the end of a run, its peak. A `RequestLog`
# answers each path from its columns (sim/request_log.py).
_REQUEST_READS: list[tuple[str, str, type | None]] = [
    ("request_id", "req.request_id", np.int64),
    ("node", "node", np.int64),
    ("tag", "req.tag", None),
    ("arrival_s", "arrival_s", np.float64),
    ("first_token_s", "first_token_s", np.float64),
    ("finish_s", "finish_s", np.float64),
    ("prompt_tokens", "prompt_tokens", np.int64),
    ("cached_tokens", "cached_tokens", np.int64),
    ("output_tokens", "num_generated", np.int64),
    ("preemptions", "preemptions", np.int64),
    ("false_hits", "false_hits", np.int64),
    ("wrong_reuse_tokens", "wrong_reuse_tokens", np.int64),
    ("status", "status.value", None),
    ("routed_s", "routed_s", np.float64),
    ("use_after_free", "use_after_free", np.int64),
    ("scheduled_s", "scheduled_s", np.float64),
    ("queued_step", "queued_step", np.int64),
]


def request_frame(sequences: Iterable[Sequence] | RequestLog, arm: str) -> pd.DataFrame:
    """requests.csv: one row per request, simulated or served by the engine alike."""
    seqs = sequences if isinstance(sequences, list | RequestLog) else list(sequences)
    if not len(seqs):  # no values to take dtypes from: pandas' own empty columns
        return pd.DataFrame([], columns=REQUEST_COLUMNS)
    n = len(seqs)
    columns: dict[str, object] = {"arm": [arm] * n}
    for name, path, dtype in _REQUEST_READS:
        values = seqs.values(path) if isinstance(seqs, RequestLog) else map(attrgetter(path), seqs)
        columns[name] = list(values) if dtype is None else np.fromiter(values, dtype, count=n)
    return pd.DataFrame(columns, columns=REQUEST_COLUMNS)


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else math.nan


# what `summarize` reads of the finished requests
_DONE_COLUMNS = (
    "arrival_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens",
    "cached_tokens",
)


def summarize(requests: pd.DataFrame, series: pd.DataFrame, cluster: Cluster) -> dict:
    """The run's headline metrics (times in ms, throughputs per second of the measured window)."""
    cfg = cluster.cfg
    end_s = cluster.env.now  # duration_s, or later when a drain window ran
    if cfg.warmup_s > 0:  # requests sent during the warm-up are served, not counted
        requests = requests[requests.arrival_s >= cfg.warmup_s]
    duration = end_s - cfg.warmup_s
    # only the columns read below: a copy of every column was ~15 MB at 256 nodes
    finished = requests.status == Status.FINISHED.value
    done = requests.loc[finished, list(_DONE_COLUMNS)]
    ttft = ((done.first_token_s - done.arrival_s) * 1e3).to_numpy()
    e2el = ((done.finish_s - done.arrival_s) * 1e3).to_numpy()
    decode_tokens = (done.output_tokens - 1).clip(lower=1)
    tpot = ((done.finish_s - done.first_token_s) * 1e3 / decode_tokens)[
        done.output_tokens > 1
    ].to_numpy()
    prompt_tokens = int(done.prompt_tokens.sum())
    per_time = series.groupby("time_s")[
        ["kv_pool_bytes", "kv_allocated_bytes", "kv_cached_bytes", "kv_retired_bytes"]
    ].sum()
    if cluster.cfg.cache.mechanism == "contiguous":
        held = (
            per_time.kv_pool_bytes
        )  # the grown segments, holes included: no one else can use them
    else:
        held = per_time.kv_allocated_bytes + per_time.kv_retired_bytes  # cached pages are evictable
    allocated = series.kv_allocated_bytes.sum()
    counters = [n.kv.counters() for n in cluster.nodes]
    out = {
        "completed": len(done),
        "failed": int((requests.status == Status.FAILED.value).sum()),
        "unfinished": int((requests.status == Status.UNFINISHED.value).sum()),
        "duration_s": cfg.duration_s,
        "measured_s": duration,  # the window throughputs divide by: warmup_s to the run's end
        "request_throughput": len(done) / duration,
        "output_throughput": float(done.output_tokens.sum()) / duration,
        "total_token_throughput": float(done.output_tokens.sum() + done.prompt_tokens.sum())
        / duration,
        "mean_ttft_ms": float(ttft.mean()) if ttft.size else math.nan,
        "p50_ttft_ms": _pct(ttft, 50),
        "p99_ttft_ms": _pct(ttft, 99),
        "mean_tpot_ms": float(tpot.mean()) if tpot.size else math.nan,
        "p50_tpot_ms": _pct(tpot, 50),
        "p99_tpot_ms": _pct(tpot, 99),
        "mean_e2el_ms": float(e2el.mean()) if e2el.size else math.nan,
        "p50_e2el_ms": _pct(e2el, 50),
        "p99_e2el_ms": _pct(e2el, 99),
        **_censored(requests, ttft, e2el, end_s),
        # Over completed requests (their prompt tokens served from the cache / their prompt tokens).
        "prefix_hit_rate": float(done.cached_tokens.sum()) / prompt_tokens
        if prompt_tokens
        else 0.0,
        # KV memory that could not be handed to a new request without evicting, all nodes.
        "peak_kv_bytes": int(held.max()) if len(held) else 0,
        "peak_cached_kv_bytes": int(per_time.kv_cached_bytes.max()) if len(per_time) else 0,
        "kv_utilization": float(series.kv_live_bytes.sum() / allocated) if allocated else 0.0,
        "oom_events": sum(c.alloc_stalls for c in counters),
        # cache.on_oom crash: times a node's serving process died and restarted (all nodes)
        "crashes": int(sum(n.num_crashes for n in cluster.nodes)),
        "preemptions": int(sum(n.num_preemptions for n in cluster.nodes)),
        "false_hits": int(requests.false_hits.sum()),
        "wrong_reuse_tokens": int(requests.wrong_reuse_tokens.sum()),
        "evicted_pages": int(sum(c.evicted_pages for c in counters)),
        "admission_rejected_tokens": int(sum(c.admission_rejected_tokens for c in counters)),
        **_cache_engine(series, counters),
        "mean_node_busy": float(np.mean([n.busy_s for n in cluster.nodes])) / end_s,
        # The fixed per-step cost in every step's price, and where that number comes from.
        "step_overhead_ms": cfg.gpu.step_overhead_s * 1e3,
        "step_overhead_source": cfg.gpu.step_overhead_source,
        **_routing_balance(requests, series, cluster),
    }
    # Requests that waited at the head of a queue for a contiguous hole; `oom_events` is its old
    # name, kept one release as an alias (neither counts failures: see `failed`, `crashes`).
    out["alloc_stalls"] = out["oom_events"]
    if cluster.placement is not None:  # KV across nodes: network bytes, links
        out.update(cluster.placement.summary(duration))
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}


def _sampled_counters(c: CacheCounters) -> tuple[int, int, int]:
    """(protected pages now, evicted pages so far, use-after-free so far): the sampled columns."""
    return c.protected_pages, c.evicted_pages, c.use_after_free


def _cache_engine(series: pd.DataFrame, counters: list[CacheCounters]) -> dict:
    """The KV engine's own metrics: sums over nodes; gauges are taken over the sample times."""
    per_time = series.groupby("time_s")[
        ["kv_internal_frag_bytes", "index_overhead_bytes", "protected_pages", "kv_retired_bytes"]
    ].sum()
    empty = per_time.empty
    return {
        "use_after_free": int(sum(c.use_after_free for c in counters)),
        "protected_pages": 0 if empty else int(per_time.protected_pages.max()),  # peak, all nodes
        "internal_fragmentation_bytes": 0.0
        if empty
        else float(per_time.kv_internal_frag_bytes.mean()),
        "index_overhead_bytes": 0 if empty else int(per_time.index_overhead_bytes.max()),  # peak
        # What epoch reclamation holds back: retired pages waiting for their readers (all nodes).
        "mean_retired_kv_bytes": 0.0 if empty else float(per_time.kv_retired_bytes.mean()),
        "peak_retired_kv_bytes": max((c.peak_retired_bytes for c in counters), default=0),
    }


def _censored(requests: pd.DataFrame, ttft: np.ndarray, e2el: np.ndarray, end_s: float) -> dict:
    """Lower bounds of P99 TTFT and E2E that count unfinished requests at their age at the end
    (a request still waiting for its first token has TTFT >= its age). Over finished requests
    only, an overloaded run's P99 looks better the more requests it leaves behind."""
    left = requests[requests.status == Status.UNFINISHED.value]
    # As floats: a column of only None (no request got a first token) is object-typed otherwise.
    arrival_s = left.arrival_s.to_numpy(dtype=float)
    age_ms = (end_s - arrival_s) * 1e3
    first_ms = (left.first_token_s.to_numpy(dtype=float) - arrival_s) * 1e3
    left_ttft = np.where(np.isnan(first_ms), age_ms, first_ms)
    return {
        "p99_ttft_censored_ms": _pct(np.concatenate([ttft, left_ttft]), 99),
        "p99_e2el_censored_ms": _pct(np.concatenate([e2el, age_ms]), 99),
    }


def _ratio_max_mean(values: np.ndarray) -> float:
    mean = float(values.mean()) if values.size else 0.0
    return float(values.max()) / mean if mean > 0 else math.nan


def _routing_balance(requests: pd.DataFrame, series: pd.DataFrame, cluster: Cluster) -> dict:
    """How evenly the router spread the work (1.0 = perfectly even) and what deciding cost."""
    routed = requests[requests.node >= 0]
    per_node = np.bincount(routed.node.to_numpy(dtype=np.int64), minlength=len(cluster.nodes))
    wait_ms = ((routed.routed_s - routed.arrival_s) * 1e3).to_numpy()
    return {
        # max / mean over nodes of the time-averaged load (sim/views.py: KV + queue demand)
        "load_imbalance": _ratio_max_mean(series.groupby("node").load.mean().to_numpy()),
        # max / mean over nodes of the share of time spent computing steps
        "busy_imbalance": _ratio_max_mean(np.array([n.busy_s for n in cluster.nodes])),
        "max_node_request_share": float(per_node.max() / per_node.sum())
        if per_node.sum()
        else math.nan,
        "mean_router_wait_ms": float(wait_ms.mean()) if wait_ms.size else math.nan,
        "p99_router_wait_ms": _pct(wait_ms, 99),
        # share of the router's lane-seconds spent deciding (1.0 = saturated)
        "router_utilization": _router_utilization(cluster),
    }


def _router_utilization(cluster: Cluster) -> float:
    router = cluster.router
    if router is None:  # a cluster without a central router (none today; tests build one)
        return math.nan
    return router.busy_s / (router.cfg.lanes * cluster.cfg.duration_s)


def eviction_frame(cluster: Cluster, arm: str) -> pd.DataFrame:
    """Evicted pages by their position in the prefix, per node.

    A page at depth d (1-based) starts at prompt token (d-1) P. The first page is its own bucket
    [0, P); deeper pages fall in power-of-two buckets [2^b, 2^(b+1)). Deep buckets evicted = long
    prefixes lost.
    """
    rows = []
    page = cluster.page_size
    for node in cluster.nodes:
        counts = node.kv.counters().evicted_by_depth
        if counts is None:
            continue
        per_bucket: dict[int, int] = {}
        for depth in np.flatnonzero(counts).tolist():
            first = (depth - 1) * page
            start = 0 if first == 0 else 1 << (first.bit_length() - 1)
            per_bucket[start] = per_bucket.get(start, 0) + int(counts[depth])
        for start in sorted(per_bucket):
            rows.append(
                (arm, node.node_id, start, page if start == 0 else 2 * start, per_bucket[start])
            )
    return pd.DataFrame(
        rows, columns=["arm", "node", "prefix_position_from", "prefix_position_to", "evicted_pages"]
    )
