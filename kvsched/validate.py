"""`kvsched validate RUN_DIR`: how well the simulator predicts a measured engine run.

An engine run (engine/: the same scheduler and KV cache, executed on a GPU) wrote the
simulator's run-directory schema plus measured steps. Three comparisons, each one question:

  replay     Drive the pure scheduler again, step by step, with the engine's own arrivals and
             step times (no latency model). Same cache code, same decisions: the cached tokens of
             every request and the composition of every step must be identical. Any mismatch is
             a bug, not a modelling error.
  step time  Price every measured step's exact batch composition with the latency model: the
             cleanest test of the step price (no queueing feedback).
  serving    Simulate the same requests (the engine's arrival times for open loop; the same
             clients for closed loop) on the simulator and compare per-request TTFT, TPOT and
             E2E (absolute relative error, median and p90) and throughput.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kvsched.host_speed import (
    HostPricing,
    HostSpeed,
    HostSpeedExecutor,
    host_exponent,
    host_price_s,
    reference_s,
)
from policies import make_policy
from reports.validation import latency_table
from sim.cascade import CommonPrefixMemo, longest_decode, shared_reads
from sim.cluster import Cluster
from sim.config import ConfigError, ExperimentConfig, GpuConfig, parse_config
from sim.kv.manager import paged_kv_from_config
from sim.latency import LatencyModel, make_latency_model
from sim.latency.factory import overhead_terms
from sim.metrics import REQUEST_COLUMNS, request_frame
from sim.request import Request, Workload
from sim.scheduler import Scheduler, Step
from sim.sequence import Sequence, new_sequence
from sim.steps import STEP_COLUMNS, step_plan
from workloads.registry import make_workload

ARM = "engine"
SCHEMA = "kvsched-validation/1"
REPORT_TITLE = "<title>kvsched validation"


@dataclass
class EngineRun:
    cfg: ExperimentConfig
    requests: pd.DataFrame
    steps: pd.DataFrame


def load_engine_run(run_dir: Path) -> EngineRun:
    """The run's resolved config, requests.csv and steps.csv, checked field by field: a damaged
    file is refused with its path, line and field (ConfigError), never replayed as a shorter
    run that agrees with nothing to disagree about."""
    arm = run_dir / ARM
    for name in ("config.json", "requests.csv", "steps.csv"):
        if not (arm / name).is_file():
            raise ConfigError(f"{run_dir}: not an engine run (no {ARM}/{name})")
    try:
        raw = json.loads((arm / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{arm / 'config.json'}: not valid JSON ({err})") from None
    cfg = parse_config(raw, source=str(arm))
    if _served_by_engine(run_dir):
        cfg = _as_served(cfg, _json_file(run_dir / "run_info.json"))
    requests = _read_table(arm / "requests.csv", REQUEST_COLUMNS, REQUEST_FIELDS)
    steps = _read_table(arm / "steps.csv", STEP_COLUMNS, STEP_FIELDS, ENGINE_STEP_FIELDS)
    _check_requests(arm / "requests.csv", requests)
    _check_steps(arm / "steps.csv", steps)
    _check_steps_cover_requests(arm, requests, steps)
    return EngineRun(cfg, requests, steps)


def _json_file(path: Path) -> dict:
    """A JSON object file of the run ({} when absent); a damaged one is refused (ConfigError)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return data


def _served_by_engine(run_dir: Path) -> bool:
    """Whether kvsched.engine_run wrote the run: its summary.json names a measured latency
    model (engine/rundir.py); a simulated run in the same layout names the model it priced with."""
    latency_model = _json_file(run_dir / "summary.json").get("latency_model", "")
    return isinstance(latency_model, str) and latency_model.startswith("measured:")


def _as_served(cfg: ExperimentConfig, run_info: dict) -> ExperimentConfig:
    """The config as the engine served it (`run_info`: the engine's run_info.json).

    - Routing: the engine routes each arrival inside its loop, between two steps, before it
      plans the next one (engine/driver.py); its CPU time is part of the step's measured host
      time. The config's `router.decision_time_s` (lanes that take that long per decision while
      the nodes step) is not what ran: simulated with it, a node starts a step on the first of
      several simultaneous arrivals (a closed loop's clients at the start) that the engine
      plans with all of them. So the simulated router decides in no time (0).
    - Graph mode: without piecewise graphs (`--graphs none | decode`) no step with a chunk is
      graphed, so every such step is priced, and its terms fitted, as launched whole
      (gpu.mixed_graph_max_tokens 0). Runs written before the engine recorded it: all."""
    router = cfg.router.model_copy(update={"decision_time_s": 0.0})
    update: dict = {"router": router}
    if run_info.get("graphs", "all") in ("none", "decode"):
        update["gpu"] = cfg.gpu.model_copy(update={"mixed_graph_max_tokens": 0})
    return cfg.model_copy(update=update)


ROUNDING_S = 1e-6  # the coarsest rounding of the times a run's CSV files are written with

# Fields the validation reads, and what each must hold: (kind, least value); None: any.
REQUEST_FIELDS = {
    "request_id": ("int", 0),
    "arrival_s": ("float", 0.0),
    "cached_tokens": ("int", 0),
    "queued_step": ("int", -1),
}
STEP_FIELDS = {
    "step": ("int", 0),
    "start_s": ("float", 0.0),
    "duration_s": ("float", 0.0),
    "num_prefill": ("int", 0),
    "prefill_tokens": ("int", 0),
    "num_decode": ("int", 0),
    "decode_ctx_sum": ("int", 0),
    "prefill_ctx_sum": ("int", 0),
    "cached_tokens": ("int", 0),
}
# The engine's own columns (engine.runner.ENGINE_STEP_COLUMNS), checked where present: the
# overhead fit reads them (a simulated run has none).
# plan_s, apply_s, loop_s: since round 9 (sched_s = plan_s + apply_s; engine/driver.py).
ENGINE_STEP_FIELDS = {
    name: ("float", 0.0) for name in ("gpu_s", "prep_s", "sched_s", "plan_s", "apply_s", "loop_s")
}


def _read_table(
    path: Path, columns: list[str], fields: dict, optional: dict | None = None
) -> pd.DataFrame:
    """The table, refused with path, line and field where a column is missing or a value is not
    what `fields` (and `optional`, for the columns present) allow."""
    try:
        frame = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else "empty"
        raise ConfigError(f"{path}: not a CSV table ({first})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"{path}: missing columns {', '.join(missing)} (written by an older engine?)"
        )
    if frame.empty:
        raise ConfigError(f"{path}: no rows (the run served nothing to compare)")
    present = {k: v for k, v in (optional or {}).items() if k in frame.columns}
    for name, (kind, least) in {**fields, **present}.items():
        values = pd.to_numeric(frame[name], errors="coerce")
        bad = ~np.isfinite(values.to_numpy(dtype=np.float64)) | (values < least)
        if kind == "int":
            bad |= values.notna() & (values != values.round())
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            want = f"{'an integer' if kind == 'int' else 'a number'} >= {least}"
            got = frame[name].iloc[i]
            shown = "nothing" if pd.isna(got) else repr(str(got))
            raise ConfigError(f"{path} line {i + 2}: {name} must be {want}, got {shown}")
        frame[name] = values.astype(np.int64 if kind == "int" else np.float64)
    return frame


def _check_requests(path: Path, requests: pd.DataFrame) -> None:
    """The engine numbers requests in the order the workload generates them: 0 .. n-1, once
    each (validate regenerates them from the config up to the last id)."""
    ids = requests.request_id.to_numpy()
    if not np.array_equal(np.sort(ids), np.arange(len(ids))):
        first: dict[int, int] = {}
        for k, v in enumerate(ids.tolist()):
            if v >= len(ids) or first.setdefault(v, k) != k:
                break
        i = k
        raise ConfigError(
            f"{path} line {i + 2}: request_id must number the {len(ids)} requests "
            f"0..{len(ids) - 1} once each, got {ids[i]}"
        )


def _check_steps_cover_requests(arm: Path, requests: pd.DataFrame, steps: pd.DataFrame) -> None:
    """Every request's first step is recorded, but for the one step in flight when the run
    ended (not recorded: it was not applied): a steps.csv cut short is refused, not replayed."""
    last = steps.iloc[-1]
    later = requests.scheduled_s[requests.scheduled_s > last.start_s + 1e-9]
    starts = sorted(set(later.round(9)))
    if len(starts) > 1 or (starts and starts[0] < last.start_s + last.duration_s - 1e-6):
        raise ConfigError(
            f"{arm / 'steps.csv'}: ends at step {int(last.step)} (start {last.start_s:g} s) but "
            f"requests.csv has requests first scheduled at {len(starts)} later step starts: "
            "steps are missing"
        )


def _check_steps(path: Path, steps: pd.DataFrame) -> None:
    """Steps in order (0, 1, ...), each starting no earlier than the last ended, with chunks
    `new@context` that add up to the row's counts."""
    bad = steps.step.to_numpy() != np.arange(len(steps))
    if bad.any():
        i = int(np.argmax(bad))
        raise ConfigError(
            f"{path} line {i + 2}: step must be {i} (steps in order), got {steps.step.iloc[i]}"
        )
    start, end = steps.start_s.to_numpy(), (steps.start_s + steps.duration_s).to_numpy()
    # Back-to-back steps written with rounded times (the engine writes 6 decimals, kvsched run
    # 9) may overlap by the rounding of two values: up to 1 us is not an overlap.
    overlap = start[1:] < end[:-1] - ROUNDING_S
    if overlap.any():
        i = int(np.argmax(overlap)) + 1
        raise ConfigError(
            f"{path} line {i + 2}: start_s {start[i]} is before the previous step ended"
        )
    for i, row in enumerate(steps.itertuples(index=False)):
        text = "" if row.prefill_chunks != row.prefill_chunks else str(row.prefill_chunks)
        chunks = [c.split("@") for c in text.split(";")] if text else []
        ok = all(len(c) == 2 and c[0].isdigit() and c[1].isdigit() for c in chunks)
        if (
            not ok
            or len(chunks) != row.num_prefill
            or (sum(int(n) for n, _ in chunks) != row.prefill_tokens)
        ):
            raise ConfigError(
                f"{path} line {i + 2}: prefill_chunks must be num_prefill={row.num_prefill} items "
                f"'new@context' joined by ';' adding up to prefill_tokens={row.prefill_tokens}, "
                f"got {text!r}"
            )


def run_workload(cfg: ExperimentConfig) -> Workload:
    """The run's workload as the config generates it (same seed: same ids and tokens)."""
    return make_workload(
        cfg.workload.name, cfg.workload.params, np.random.default_rng([cfg.seed, 0])
    )


def measured_requests(run: EngineRun) -> tuple[list[Request], int | None]:
    """The requests the engine received (ids in requests.csv), regenerated from the config; the
    stream is read only as far as the last of them (a closed loop's stream is endless)."""
    workload = run_workload(run.cfg)
    wanted = set(run.requests.request_id.astype(int))
    last = max(wanted, default=-1)
    requests = []
    for req in workload.requests:
        if req.request_id in wanted:
            requests.append(req)
        if req.request_id >= last:
            break
    return requests, workload.num_clients


# -- replay: same decisions, exactly --------------------------------------------------------------
@dataclass(frozen=True)
class ReplayedSteps:
    """What steps.csv does not record, read off the replay per step: decode reads of pages
    another decode of the step reads too (sim.cascade.shared_reads), the longest decode context,
    and whether the engine had work left after the step (so the next step followed at once: no
    idle wait between them)."""

    shared_tokens: np.ndarray  # int64
    longest_decode: np.ndarray  # int64
    busy_after: np.ndarray  # bool


def replay(
    run: EngineRun, requests: list[Request], on_step: Callable[[int, Step], None] | None = None
) -> tuple[dict, ReplayedSteps]:
    """Re-drive sim's scheduler with the engine's queue and step times; count disagreements,
    and read each step's shared decode reads off the replayed block tables (the engine's own:
    same cache code, same decisions), which steps.csv does not record. `on_step(k, step)` sees
    each planned step (row k of steps.csv) before it is applied.

    Each request joins the queue before the step the engine first planned with it queued
    (requests.csv `queued_step`), so every scheduling decision sees the engine's queue."""
    cfg = run.cfg
    latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    scheduler = Scheduler(
        cfg.node,
        paged_kv_from_config(cfg, latency, 0, make_policy),
        make_policy("scheduling", cfg.policies.scheduling),
    )
    by_id = {r.request_id: r for r in requests}
    queued = run.requests[run.requests.queued_step >= 0].sort_values(
        ["queued_step", "routed_s", "request_id"], kind="stable"
    )
    joins = list(zip(queued.queued_step, queued.request_id, queued.arrival_s, strict=True))
    seqs: dict[int, Sequence] = {}
    composition_mismatch, cursor, last_end = 0, 0, 0.0
    shared = np.zeros(len(run.steps), dtype=np.int64)
    busy_after = np.zeros(len(run.steps), dtype=bool)
    longest = np.zeros(len(run.steps), dtype=np.int64)
    memo: CommonPrefixMemo = {}
    for k, row in enumerate(run.steps.itertuples(index=False)):
        while cursor < len(joins) and joins[cursor][0] <= k:
            _, request_id, arrival_s = joins[cursor]
            req = by_id[int(request_id)]
            seq = new_sequence(req, cfg.cache.page_size, cfg.cache.hash_bits, float(arrival_s))
            seqs[req.request_id] = seq
            scheduler.add(seq)
            cursor += 1
        if not scheduler.running:  # the node was idle: retired pages came back meanwhile
            scheduler.kv.idle_reclaim(last_end)
        step = scheduler.schedule(float(row.start_s))
        composition_mismatch += _composition(step) != _row_composition(row)
        shared[k] = shared_reads(step.items, cfg.cache.page_size, memo)
        longest[k] = longest_decode(step.items)
        if on_step is not None:
            on_step(k, step)
        last_end = float(row.start_s) + float(row.duration_s)
        scheduler.apply(step, last_end)
        busy_after[k] = scheduler.has_work()
    engine_cached = dict(
        zip(run.requests.request_id.astype(int), run.requests.cached_tokens, strict=True)
    )
    # Admitted by the engine in a recorded step (the step in flight at the end is not recorded)
    last_start = float(run.steps.start_s.iloc[-1])
    r = run.requests
    admitted = set(
        map(int, r.request_id[r.scheduled_s.notna() & (r.scheduled_s <= last_start + 1e-9)])
    )
    replayed = {i for i, seq in seqs.items() if seq.scheduled_s == seq.scheduled_s}
    # admitted by one side only (a step missing, or another decision), then cached tokens
    mismatched = len(admitted ^ replayed) + sum(
        seqs[i].cached_tokens != engine_cached[i] for i in admitted & replayed
    )
    counts = {
        "cached_tokens_mismatch": int(mismatched),
        "step_composition_mismatch": int(composition_mismatch),
        "replayed_steps": len(run.steps),
        # every output token of the recorded steps, finished or not (the throughput's numerator)
        "output_tokens_measured": sum(seq.num_generated for seq in seqs.values()),
    }
    return counts, ReplayedSteps(shared, longest, busy_after)


def _composition(step) -> tuple[int, int, int]:
    prefill = [n for _, n, pre in step.items if pre]
    return len(prefill), sum(prefill), len(step.items) - len(prefill)


def _row_composition(row) -> tuple[int, int, int]:
    return int(row.num_prefill), int(row.prefill_tokens), int(row.num_decode)


# -- the step price ----------------------------------------------------------------------------
def measured_step_s(steps: pd.DataFrame, busy_after: np.ndarray) -> np.ndarray:
    """What a step cost the engine's loop: from its start to the next step's start when the
    engine had work left (`busy_after`): the measured duration, the scheduler's CPU time around
    it (`sched_s`: `apply` after it, `schedule` before the next) and the loop's own work between
    the two (arrivals, sampling the time series: 20-150 us). The simulator's step price is the
    time from one step's start to the next's, so it must cover all of it. After the last step,
    or when the engine went idle, the loop's own work is not separable from the wait: duration
    plus `sched_s` there."""
    measured = steps.duration_s.to_numpy(dtype=np.float64).copy()
    if "sched_s" in steps.columns:
        measured += steps.sched_s.to_numpy(dtype=np.float64)
    to_next = np.diff(steps.start_s.to_numpy(dtype=np.float64))
    measured[:-1] = np.where(busy_after[:-1], to_next, measured[:-1])
    return measured


def step_errors(
    run: EngineRun,
    latency: LatencyModel,
    replayed: ReplayedSteps,
    host: HostPricing | None = None,
) -> pd.DataFrame:
    """Predicted vs measured cost (`measured_step_s`) of every measured step; `shared`: each
    step's decode reads of pages another decode of it reads too (`replay`). `host`: each
    step's host part priced at the host's measured speed at its start (kvsched/host_speed.py)."""
    rows = run.steps.to_dict("records")
    plans = [step_plan(r) for r in rows]
    columns = (replayed.shared_tokens.tolist(), replayed.longest_decode.tolist())
    for plan, tokens, longest in zip(plans, *columns, strict=True):
        plan.decode_shared_tokens, plan.decode_ctx_max = tokens, longest
    predicted = np.array([latency.step_time_s(plan) for plan in plans])
    if host is not None:
        factor = host.factors(run.steps.start_s.to_numpy())
        features = run.steps[list(HOST_FEATURES)].to_numpy(dtype=np.int64).tolist()
        terms = overhead_terms(run.cfg.gpu)
        host_s = [
            host_price_s(terms, decodes, chunks, context, tokens, host.device_extra_s)
            for decodes, chunks, context, tokens in features
        ]
        predicted = predicted + np.array(host_s) * (factor - 1.0)
    measured = measured_step_s(run.steps, replayed.busy_after)
    has_prefill = run.steps.num_prefill.to_numpy() > 0
    return pd.DataFrame({"measured_s": measured, "predicted_s": predicted, "prefill": has_prefill})


OVERHEAD_TERMS = (
    "device_time_scale",
    "decode_kv_overhead_s",
    "step_overhead_s",
    "prefill_step_overhead_s",
    "token_overhead_s",
    "host_token_overhead_s",
    "decode_overhead_s",
    "mixed_decode_overhead_s",
    "chunk_overhead_s",
    "context_overhead_s",
    "mixed_step_floor_s",
    "eager_step_floor_s",
)
# The device fit's grids (coarse, then fine around the coarse best): floors under steps with a
# chunk, costs per prefill token, extras per such step. Wide enough for a 70B shard at TP 2
# (16 us per token, a 25 ms floor); a fit on a grid's top edge is refused (`GridEdgeError`).
FLOOR_GRID_S = np.arange(0.0, 0.0605, 5e-4)  # 0-60 ms
COARSE_TOKEN_GRID_S = np.arange(0.0, 60.5e-6, 2e-6)  # 0-60 us
COARSE_EXTRA_GRID_S = np.arange(0.0, 0.0605, 2e-3)  # 0-60 ms
FINE_STEPS = 41  # points of each fine grid, spanning +-1 coarse step around the coarse best


def measured_overheads(samples: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """What the priced kernels leave out, measured on engine runs of one model and GPU (their
    `overhead_samples`, pooled; the terms of sim.latency.base.StepOverhead), the device part and
    the host part each on its own clock.

    Device: the scale and a cost per decode context token (`_fit_decode_device`) from the
    decode-only steps' GPU time over their priced kernels; steps with a
    prefill chunk give, from their GPU time, the cost per prefill token, an extra and the two
    floors (graphed steps of at most `gpu.mixed_graph_max_tokens` tokens; larger ones, launched
    whole), on a grid with the least absolute error.

    Host: what each step spent off the GPU clock (its preparation, the sync, the scheduler's
    planning and applying of it: duration + `sched_s` - `gpu_s`), plus the loop's own work
    between steps (arrivals, sampling: the median gap to the next start over steps the engine
    had work after). Least-absolute-error linear fits with non-negative terms: decode-only steps
    on the decode count (fixed + per decode), steps with a chunk on their decodes, chunks,
    chunks' context tokens and prefill tokens. A run without GPU times (a CPU run) counts the
    priced kernels as its device time."""
    pooled = _pooled(samples)
    prefill = pooled["prefill"]
    scale, per_kv, priced = _device_scale(pooled)
    host = _host_part(pooled, priced) / pooled.get("speed", 1.0)  # at the reference speed
    overhead, per_decode = 0.0, 0.0
    if (~prefill).any():
        overhead, per_decode = _fit_nonneg_lad([pooled["num_decode"][~prefill]], host[~prefill])
    terms = dict.fromkeys(OVERHEAD_TERMS, 0.0) | {
        "device_time_scale": scale,
        "decode_kv_overhead_s": per_kv,
        "step_overhead_s": overhead,
        "decode_overhead_s": per_decode,
    }
    if not prefill.any():
        return terms
    per_token, device_extra, floors = _fit_chunk_device(pooled, priced)
    fixed, decode_s, chunk_s, context_s, host_token_s = _fit_nonneg_lad(
        [pooled[c][prefill] for c in HOST_FEATURES], host[prefill]
    )
    return terms | {
        # the mixed step's host terms over the decode-only step's, which it pays too
        "prefill_step_overhead_s": max(0.0, device_extra + fixed - overhead),
        "mixed_decode_overhead_s": max(0.0, decode_s - per_decode),
        "chunk_overhead_s": chunk_s,
        "context_overhead_s": context_s,
        "token_overhead_s": per_token,
        "host_token_overhead_s": host_token_s,
        "mixed_step_floor_s": floors[0],
        "eager_step_floor_s": floors[1],
    }


def chunk_device_terms(samples: list[dict[str, np.ndarray]]) -> tuple[float, float, list[float]]:
    """(device cost per prefill token, fixed extra per step, the two floors) that
    `measured_overheads` fits to the steps with a chunk of these samples (at least one such
    step): the extra is carried by `gpu.prefill_step_overhead_s` with the host's."""
    pooled = _pooled(samples)
    return _fit_chunk_device(pooled, _device_scale(pooled)[2])


def _pooled(samples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.concatenate([s[key] for s in samples]) for key in samples[0]}


def _device_scale(pooled: dict[str, np.ndarray]) -> tuple[float, float, np.ndarray]:
    """(device time scale, cost per decode KV token, each step's priced kernels with both): the
    serving machine's device time over the calibration's (and the decode step's unpriced device
    work: sampling, the graph's input copies), from the decode-only steps; 1 without GPU times."""
    usable = ~pooled["prefill"] & (pooled["gpu_s"] > 0) & (pooled["priced"] > 0)
    scale, per_kv = 1.0, 0.0
    if usable.any():
        ratios = pooled["gpu_s"][usable] / pooled["priced"][usable]
        scale, per_kv = _fit_decode_device(
            ratios, pooled["decode_kv"][usable] / pooled["priced"][usable]
        )
    return scale, per_kv, pooled["priced"] * scale + per_kv * pooled["decode_kv"]


def _fit_chunk_device(
    pooled: dict[str, np.ndarray], priced: np.ndarray
) -> tuple[float, float, list[float]]:
    """The device fit of the steps with a chunk: their GPU time (the priced kernels without
    one) against their priced kernels (`_fit_prefill_terms`)."""
    device = np.where(pooled["gpu_s"] > 0, pooled["gpu_s"], priced)
    chunk = pooled["prefill"]
    return _fit_prefill_terms(
        priced[chunk], pooled["prefill_tokens"][chunk], device[chunk], pooled["graphed"][chunk]
    )


def probe_samples(
    probes: list[EngineRun], speeds: list[tuple[HostSpeed, float]] | None = None
) -> list[dict[str, np.ndarray]]:
    """`overhead_samples` of each run, replayed on the engine's own queue (`speeds`: each
    run's host speed and the reference it is stated against, kvsched/host_speed.py)."""
    speeds = speeds or [None] * len(probes)  # type: ignore[list-item]
    return [
        overhead_samples(p, replay(p, measured_requests(p)[0])[1], speed)
        for p, speed in zip(probes, speeds, strict=True)
    ]


# What a step with a prefill chunk's host time is fitted on (steps.csv columns)
HOST_FEATURES = ("num_decode", "num_prefill", "prefill_ctx_sum", "prefill_tokens")


def _fit_decode_device(ratios: np.ndarray, kv_per_priced: np.ndarray) -> tuple[float, float]:
    """(device time scale, device time per decode KV token) of decode-only steps, from their
    GPU time over their priced kernels (`ratios`) and their decode context tokens over the same
    price: ratio = scale + per_kv * kv / priced, least absolute error, per_kv >= 0. Without a
    positive per-token term the scale is the ratios' median."""
    scale, per_kv = _fit_nonneg_lad([kv_per_priced], ratios)
    if per_kv <= 0.0 or scale <= 0.0:  # no cost per token, or one that takes the whole time
        return float(np.median(ratios)), 0.0
    return scale, per_kv


def _host_part(sample: dict[str, np.ndarray], priced: np.ndarray) -> np.ndarray:
    """Each step's host part: its time off the GPU clock (without one, its duration less its
    priced kernels, `priced`) plus the loop's median gap between steps followed at once."""
    gaps = sample["gaps"]
    loop = max(0.0, float(np.median(gaps))) if gaps.size else 0.0
    return sample["off_device"] - np.where(sample["gpu_s"] > 0, 0.0, priced) + loop


def overhead_samples(
    run: EngineRun, replayed: ReplayedSteps, speed: tuple[HostSpeed, float] | None = None
) -> dict[str, np.ndarray]:
    """Per step of one run: its priced kernels (calibration machine, no overhead terms), its GPU
    clock (`gpu_s`; 0 where the run has none), its time off that clock before subtracting it
    (duration + `sched_s`: preparation, launches, the sync, the scheduler planning and applying
    it), the host features, the loop's gaps between steps followed at once (next start -
    start - duration - sched_s), and the host's speed at its start over the reference
    (`speed`: the run's HostSpeed and the reference; 1 without)."""
    gpu = run.cfg.gpu.model_copy(
        update={**dict.fromkeys(OVERHEAD_TERMS, 0.0), "device_time_scale": 1.0}
    )
    kernels_only = make_latency_model(run.cfg.model, gpu, run.cfg.node.tp)
    steps = run.steps
    errors = step_errors(run, kernels_only, replayed)
    zeros = np.zeros(len(steps))
    gpu_s = steps.gpu_s.to_numpy(dtype=np.float64) if "gpu_s" in steps.columns else zeros
    sched_s = steps.sched_s.to_numpy(dtype=np.float64) if "sched_s" in steps.columns else zeros
    own = steps.duration_s.to_numpy(dtype=np.float64) + sched_s
    cycle = measured_step_s(steps, replayed.busy_after)
    busy = replayed.busy_after.copy()
    busy[-1:] = False  # the last step has no next start
    factor = np.ones(len(steps))
    if speed is not None:
        factor = speed[0].at(steps.start_s.to_numpy()) / speed[1]
    return {
        "speed": factor,
        "priced": errors.predicted_s.to_numpy(),
        "gpu_s": np.where(np.isfinite(gpu_s), gpu_s, 0.0),
        "off_device": own - np.where(np.isfinite(gpu_s) & (gpu_s > 0), gpu_s, 0.0),
        "prefill": errors.prefill.to_numpy(),
        # a chunk step the engine replays as piecewise graphs (its own limit: a run served
        # with --graphs none has 0)
        "graphed": (
            steps.prefill_tokens.to_numpy() + steps.num_decode.to_numpy()
            <= run.cfg.gpu.mixed_graph_max_tokens
        ),
        "gaps": (cycle - own)[busy],
        "decode_kv": steps.decode_ctx_sum.to_numpy(dtype=np.float64),
        **{c: steps[c].to_numpy(dtype=np.float64) for c in HOST_FEATURES},
    }


def host_time_medians(sample: dict[str, np.ndarray], gpu: GpuConfig) -> dict[str, float | None]:
    """The host part of a run's steps (`_host_part` of its `overhead_samples`: what
    `measured_overheads` fits), measured and as `gpu`'s terms price it (StepOverhead's host),
    medians over decode-only steps and over steps with a chunk (None where the run has no such
    step). The chunk steps' priced part includes the device fit's fixed extra, which
    `gpu.prefill_step_overhead_s` carries with the host's. Without GPU times the device time
    scale is 1, so the unscaled priced kernels are the device time."""
    measured = _host_part(sample, sample["priced"])
    terms = overhead_terms(gpu)
    columns = [sample[c].tolist() for c in HOST_FEATURES]  # decodes, chunks, context, tokens
    priced = np.array([terms.host_s(*step) for step in zip(*columns, strict=True)])
    out: dict[str, float | None] = {}
    for kind, rows in (("decode", ~sample["prefill"]), ("chunk", sample["prefill"])):
        out[f"host_{kind}_step_measured_s"] = (
            float(np.median(measured[rows])) if rows.any() else None
        )
        out[f"host_{kind}_step_priced_s"] = float(np.median(priced[rows])) if rows.any() else None
    return out


def _fit_nonneg_lad(features: list[np.ndarray], target: np.ndarray) -> list[float]:
    """[intercept, one coefficient per feature], all >= 0, minimising the summed absolute error
    (robust to the slow tail: a GC pause, a late wake-up) by iteratively reweighted least
    squares; a feature whose coefficient comes out negative is dropped and the rest refitted
    (its coefficient: 0). The intercept is clamped to 0 last."""
    x = np.column_stack([np.ones_like(target), *features])
    active = np.ones(x.shape[1], dtype=bool)
    while True:
        coef = _irls_lad(x[:, active], target)
        if (coef[1:] >= 0).all() or active.sum() == 1:
            break
        drop = np.flatnonzero(active)[1:][int(np.argmin(coef[1:]))]
        active[drop] = False
    full = np.zeros(x.shape[1])
    full[active] = coef
    return [max(0.0, float(v)) for v in full]


def _irls_lad(x: np.ndarray, y: np.ndarray, iterations: int = 500) -> np.ndarray:
    """Least absolute error by iteratively reweighted least squares, until no coefficient moves
    by more than 1e-9 of the target's scale (or `iterations`)."""
    # Scaled columns: counts (1-100) and token sums (10^3-10^5) in one solve.
    norm = np.maximum(np.abs(x).max(axis=0), 1e-12)
    xs = x / norm
    coef = np.linalg.lstsq(xs, y, rcond=None)[0]
    # A residual is floored at 0.1 us (far below a step's host time) so that the steps the fit
    # passes through do not take all the weight.
    tolerance = 1e-9 * max(float(np.abs(y).max()), 1e-12)
    for _ in range(iterations):
        weight = np.sqrt(1.0 / np.maximum(np.abs(xs @ coef - y), 1e-7))
        new = np.linalg.lstsq(xs * weight[:, None], y * weight, rcond=None)[0]
        moved = float(np.abs(new - coef).max())
        coef = new
        if moved < tolerance:
            break
    return coef / norm


def _fit_prefill_terms(
    predicted: np.ndarray, tokens: np.ndarray, target: np.ndarray, graphed: np.ndarray
) -> tuple[float, float, list[float]]:
    """(per token, extra, [graphed floor, eager floor]) minimising the summed absolute error of
    max(predicted + per_token * tokens, floor) + extra against target: on coarse grids, then on
    fine ones around the coarse best (floors on one 0.5 ms grid throughout). A subset with no
    step keeps a floor of 0. A result on the top edge of a grid means the grid is too narrow for
    the run: refused."""
    token, extra, _ = _grid_fit(
        predicted, tokens, target, graphed, COARSE_TOKEN_GRID_S, COARSE_EXTRA_GRID_S
    )
    for value, grid, name in (
        (token, COARSE_TOKEN_GRID_S, "cost per prefill token"),
        (extra, COARSE_EXTRA_GRID_S, "extra per step with a chunk"),
    ):
        if value >= grid[-1]:
            raise ConfigError(
                f"the device fit's {name} is at its grid's top ({grid[-1]:.3g} s): the grid is "
                "too narrow for this run"
            )
    return _grid_fit(
        predicted,
        tokens,
        target,
        graphed,
        _around(token, COARSE_TOKEN_GRID_S[1]),
        _around(extra, COARSE_EXTRA_GRID_S[1]),
    )


def _around(value: float, step: float) -> np.ndarray:
    """FINE_STEPS points from value - step to value + step, none below 0."""
    return np.unique(np.clip(np.linspace(value - step, value + step, FINE_STEPS), 0.0, None))


def _grid_fit(
    predicted: np.ndarray,
    tokens: np.ndarray,
    target: np.ndarray,
    graphed: np.ndarray,
    token_grid: np.ndarray,
    extra_grid: np.ndarray,
) -> tuple[float, float, list[float]]:
    """The least-absolute-error point of the grids (each subset at its own best floor)."""
    device = predicted[None, :] + token_grid[:, None] * tokens[None, :]  # [token grid, steps]
    subsets = [graphed, ~graphed]
    # errors[k, e, i, f]: subset k's error for extra e, per-token cost i, floor f
    errors = np.zeros((2, extra_grid.size, token_grid.size, FLOOR_GRID_S.size))
    for f, floor in enumerate(FLOOR_GRID_S):
        above = np.maximum(device, floor)
        for e, add in enumerate(extra_grid):
            err = np.abs(above + add - target)
            for k, rows in enumerate(subsets):
                errors[k, e, :, f] = err[:, rows].sum(axis=1)
    best = errors.min(axis=3).sum(axis=0)  # [extra, token]: each subset at its best floor
    at_e, at_i = (int(v) for v in np.unravel_index(int(np.argmin(best)), best.shape))
    floors = [
        float(FLOOR_GRID_S[int(np.argmin(errors[k, at_e, at_i]))]) if rows.any() else 0.0
        for k, rows in enumerate(subsets)
    ]
    return float(token_grid[at_i]), float(extra_grid[at_e]), floors


def _with_gpu(run: EngineRun, fields: dict) -> EngineRun:
    """The run with these `gpu.` fields in its config."""
    gpu = run.cfg.gpu.model_copy(update=fields)
    return EngineRun(run.cfg.model_copy(update={"gpu": gpu}), run.requests, run.steps)


def _pricing(run: EngineRun, measured_terms: dict[str, str] | None) -> EngineRun:
    """The run priced with these `gpu.` decode terms instead of its config's."""
    return _with_gpu(run, measured_terms) if measured_terms else run


def with_overheads(run: EngineRun, overheads: dict[str, float], source: str) -> EngineRun:
    """The run's config with per-step overheads measured elsewhere (a held-out run)."""
    return _with_gpu(run, {**overheads, "step_overhead_source": source})


# -- serving: the simulator on the same requests -----------------------------------------------
def simulate(
    run: EngineRun,
    requests: list[Request],
    num_clients: int | None,
    host: HostPricing | None = None,
) -> tuple[pd.DataFrame, int]:
    """requests.csv of a simulation of the same requests on the same config, and the output
    tokens it generated (finished requests or not). `host`: each step's host part at the
    host's measured speed at its start (step by step: `exact_steps`)."""
    cfg = run.cfg if host is None else run.cfg.model_copy(update={"exact_steps": True})
    if num_clients is None:  # open loop: each request at the time it reached the engine
        arrival = dict(
            zip(run.requests.request_id.astype(int), run.requests.arrival_s, strict=True)
        )
        timed = [_at(r, arrival[r.request_id]) for r in requests if r.request_id in arrival]
        timed.sort(key=lambda r: (r.arrival_s, r.request_id))
        workload = Workload("engine-replay", iter(timed))
    else:  # closed loop: the same clients draw the same stream, as far as the simulation goes
        workload = Workload("engine-replay", run_workload(cfg).requests, num_clients=num_clients)
    cluster = Cluster(cfg, workload, np.random.default_rng([cfg.seed, 1]), make_policy)
    if host is not None:
        for node in cluster.nodes:
            node.executor = HostSpeedExecutor(node.executor, cfg.gpu, host)
    cluster.run()
    generated = sum(seq.num_generated for seq in cluster.sequences)
    return request_frame(cluster.sequences, "sim"), generated


def _at(req: Request, arrival_s: float) -> Request:
    """A copy of `req` arriving at `arrival_s` (a finished run drops its copy's prompt)."""
    return Request(
        request_id=req.request_id,
        prompt=req.prompt,
        output_tokens=req.output_tokens,
        arrival_s=float(arrival_s),
        session_id=req.session_id,
        priority=req.priority,
        tag=req.tag,
        output=req.output,
    )


def _abs_rel(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    keep = np.isfinite(predicted) & np.isfinite(measured) & (measured > 0)
    return np.abs(predicted[keep] - measured[keep]) / measured[keep]


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def _percentile_rel_err(predicted: np.ndarray, measured: np.ndarray, q: float) -> float | None:
    """Signed relative error of the q-th percentile of the simulated distribution against the
    measured one (same requests). Per-request errors also count when, within a step, each
    request arrived: in an open loop a request waits for the step under way, and the simulated
    and measured step boundaries drift apart by a fraction of a step, so a TTFT of one or two
    steps differs per request even where the distribution agrees."""
    keep = np.isfinite(predicted) & np.isfinite(measured)
    if not keep.any():
        return None
    want = float(np.percentile(measured[keep], q))
    return (float(np.percentile(predicted[keep], q)) - want) / want if want > 0 else None


def serving_errors(
    measured: pd.DataFrame, simulated: pd.DataFrame, duration_s: float, generated: tuple[int, int]
) -> dict:
    """Per-request and distribution errors of TTFT, TPOT and E2E; throughput as output tokens
    generated per second of the run (`generated`: measured, simulated), whether or not their
    request finished in it: a closed loop's clients finish in waves, and counting finished
    requests only moves a whole wave in or out of the window on a few ms of difference."""
    m, s = latency_table(measured), latency_table(simulated)
    both = m.merge(s, left_index=True, right_index=True, suffixes=("_measured", "_sim"))
    out: dict = {"requests_compared": len(both)}
    for metric in ("ttft", "tpot", "e2e"):
        sim, meas = both[f"{metric}_s_sim"].to_numpy(), both[f"{metric}_s_measured"].to_numpy()
        err = _abs_rel(sim, meas)
        out[f"{metric}_median_abs_err"] = _pct(err, 50)
        out[f"{metric}_p90_abs_err"] = _pct(err, 90)
        for q in (50, 90):  # the distributions' percentiles, as serving benchmarks report them
            out[f"{metric}_p{q}_rel_err"] = _percentile_rel_err(sim, meas, q)
    tput = [tokens / duration_s for tokens in generated]
    out["throughput_measured"], out["throughput_sim"] = tput
    out["throughput_abs_err"] = abs(tput[1] - tput[0]) / tput[0] if tput[0] else None
    done = [_output_throughput(f, duration_s) for f in (measured, simulated)]
    out["finished_throughput_measured"], out["finished_throughput_sim"] = done
    out["finished_throughput_abs_err"] = abs(done[1] - done[0]) / done[0] if done[0] else None
    return out


def _output_throughput(requests: pd.DataFrame, duration_s: float) -> float:
    done = requests[requests.status == "finished"]
    return float(done.output_tokens.sum()) / duration_s


def repeat_errors(run_dir: Path, run: EngineRun, tokens: int, repeat_dir: Path) -> dict:
    """The serving errors between two engine runs of the same config (`serving_errors`, the
    repeat in the simulation's place): the engine's own run-to-run spread per metric, the floor
    under what a simulation of one run can reach (per request above all: where each request
    falls within the step under way is not the same twice). The repeat's own replay counts come
    with it: a repeat that does not replay exactly is no floor."""
    repeat = load_engine_run(repeat_dir)
    same = ("model", "node", "cache", "policies", "workload", "seed", "duration_s")
    differ = [k for k in same if getattr(repeat.cfg, k) != getattr(run.cfg, k)]
    graphs = [_json_file(d / "run_info.json").get("graphs", "all") for d in (run_dir, repeat_dir)]
    if graphs[0] != graphs[1]:
        differ.append("graphs")
    if differ:
        raise ConfigError(f"--repeat: {repeat_dir} is not a run of the same config ({differ[0]})")
    counts, _ = replay(repeat, measured_requests(repeat)[0])
    generated = (tokens, counts["output_tokens_measured"])
    out = serving_errors(run.requests, repeat.requests, run.cfg.duration_s, generated)
    replayed = {k: counts[k] for k in ("cached_tokens_mismatch", "step_composition_mismatch")}
    return {"run": repeat_dir.name, **replayed, **_finite(out)}


def _finite(result: dict) -> dict:
    """JSON-ready: NaN (a metric with nothing to compare) as null."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in result.items()}


def _check_held_out(run_dir: Path, overhead_from: list[Path]) -> None:
    """The probes are other runs than the judged one, each named once."""
    resolved = [p.resolve() for p in overhead_from]
    if run_dir.resolve() in resolved:
        raise ConfigError(
            f"--overhead-from {run_dir}: the run itself (the terms are judged on runs they were not measured on)"
        )
    if len(set(resolved)) != len(resolved):
        raise ConfigError("--overhead-from: a run named twice (each probe once)")


def _check_same_engine(path: Path, probe: EngineRun, run: EngineRun) -> None:
    """A probe's terms apply to a run of the same model, TP, GPU (and its calibration) and graph
    mode: anything else prices another engine."""
    fields = {
        "model": (probe.cfg.model.name, run.cfg.model.name),
        "tp": (probe.cfg.node.tp, run.cfg.node.tp),
        "gpu": (probe.cfg.gpu.name, run.cfg.gpu.name),
        "gpu.calibration": (probe.cfg.gpu.calibration, run.cfg.gpu.calibration),
        "graphed mixed steps up to (tokens)": (
            probe.cfg.gpu.mixed_graph_max_tokens,
            run.cfg.gpu.mixed_graph_max_tokens,
        ),
    }
    for name, (theirs, ours) in fields.items():
        if theirs != ours:
            raise ConfigError(
                f"--overhead-from {path}: {name} {theirs}, the run's is {ours} (the terms must "
                "be measured on the same model, tp, GPU and graph mode)"
            )


def validate(
    run_dir: Path,
    overhead_from: list[Path] | None = None,
    measured_terms: dict[str, str] | None = None,
    repeat: Path | None = None,
    host_speed: bool = False,
) -> tuple[dict, dict[str, pd.DataFrame]]:
    """The fidelity numbers and the tables the validation report draws. `overhead_from`: engine
    runs (probes of the same model and GPU) whose overhead terms, measured on their steps
    pooled, are added to the price (held out: measured there, judged here). `measured_terms`: `gpu.shared_page_reads` / `gpu.ragged_decode` /
    `gpu.prefill_batch` values to price with instead of the run config's. `repeat`: another
    engine run of the same config, compared with this one as the simulation is
    (`repeat_errors`). `host_speed`: the host's measured speed replayed (kvsched/host_speed.py;
    the overhead terms then come from the probes, `overhead_from`)."""
    run = _pricing(load_engine_run(run_dir), measured_terms)
    requests, num_clients = measured_requests(run)
    counts, replayed = replay(run, requests)
    speeds = _host_speeds(run_dir, overhead_from) if host_speed else None
    own = overhead_samples(run, replayed, speeds[0] if speeds else None)
    host = None
    if overhead_from:
        source = f"measured on {' + '.join(p.name for p in overhead_from)} (kvsched validate)"
        _check_held_out(run_dir, overhead_from)
        probes = [_pricing(load_engine_run(p), measured_terms) for p in overhead_from]
        for path, probe in zip(overhead_from, probes, strict=True):
            _check_same_engine(path, probe, run)
        samples = probe_samples(probes, speeds[1:] if speeds else None)
        if speeds:  # host time follows the probe's time to the probes' measured power
            exponent = _probes_host_exponent(samples)
            for sample in [*samples, own]:
                sample["speed"] = sample["speed"] ** exponent
        run = with_overheads(run, measured_overheads(samples), source)
        if speeds:
            host = HostPricing(*speeds[0], chunk_device_terms(samples)[1], exponent)
    measured = measured_overheads([own])
    latency = make_latency_model(run.cfg.model, run.cfg.gpu, run.cfg.node.tp)
    steps = step_errors(run, latency, replayed, host)
    step_err = _abs_rel(steps.predicted_s.to_numpy(), steps.measured_s.to_numpy())
    simulated, sim_generated = simulate(run, requests, num_clients, host)
    sim_cached = dict(zip(simulated.request_id, simulated.cached_tokens, strict=True))
    free_mismatch = sum(
        sim_cached.get(i, c) != c
        for i, c in zip(run.requests.request_id, run.requests.cached_tokens, strict=True)
    )
    result = {
        "schema": SCHEMA,
        "run": str(run_dir),
        "latency_model": latency.name,
        "shared_page_reads": run.cfg.gpu.shared_page_reads,
        "ragged_decode": run.cfg.gpu.ragged_decode,
        "prefill_batch": run.cfg.gpu.prefill_batch,
        **_host_speed_fields(host),
        **{name: getattr(run.cfg.gpu, name) for name in OVERHEAD_TERMS},
        **{f"measured_{name}": value for name, value in measured.items()},
        "step_time_median_abs_err": _pct(step_err, 50),
        "step_time_p90_abs_err": _pct(step_err, 90),
        **serving_errors(
            run.requests,
            simulated,
            run.cfg.duration_s,
            (counts["output_tokens_measured"], sim_generated),
        ),
        **counts,
        "cached_tokens_mismatch_free_run": int(free_mismatch),
        **host_time_medians(own, run.cfg.gpu),
    }
    if repeat is not None:
        result["repeat"] = repeat_errors(run_dir, run, counts["output_tokens_measured"], repeat)
    result = _finite(result)
    tables = {"steps": steps, "measured": run.requests, "simulated": simulated}
    return result, tables


def _host_speeds(run_dir: Path, overhead_from: list[Path] | None) -> list[tuple[HostSpeed, float]]:
    """(HostSpeed, reference) of the run, then of each probe: the reference is the probes'
    median probe time, so the host terms are stated at the speed the probes mostly ran at."""
    if not overhead_from:
        raise ConfigError("--host-speed: needs --overhead-from (the probes the terms come from)")
    probes = [_read_host_speed(p) for p in overhead_from]
    reference = reference_s(probes)
    return [(s, reference) for s in [_read_host_speed(run_dir), *probes]]


def _read_host_speed(run_dir: Path) -> HostSpeed:
    path = run_dir / ARM / "host_speed.csv"
    if not path.is_file():
        raise ConfigError(
            f"--host-speed: {run_dir} has no {ARM}/host_speed.csv (engine runs served since "
            "session 11 of 2026-12-01 have one)"
        )
    frame = _read_table(path, ["t_s", "probe_s"], {"t_s": ("float", 0), "probe_s": ("float", 1e-9)})
    return HostSpeed.smoothed(frame.t_s.to_numpy(), frame.probe_s.to_numpy())


def _probes_host_exponent(samples: list[dict[str, np.ndarray]]) -> float:
    """`host_exponent` on the probes' decode-only steps with a GPU clock, pooled."""
    pooled = _pooled(samples)
    decode = ~pooled["prefill"] & (pooled["gpu_s"] > 0)
    return host_exponent(
        pooled["speed"][decode], pooled["off_device"][decode], pooled["num_decode"][decode]
    )


def _host_speed_fields(host: HostPricing | None) -> dict:
    if host is None:
        return {}
    factors = host.factors(host.speed.t_s)
    return {
        "host_speed_exponent": host.exponent,
        "host_speed_reference_s": host.reference,
        "host_speed_factor_p10": float(np.percentile(factors, 10)),
        "host_speed_factor_median": float(np.median(factors)),
        "host_speed_factor_p90": float(np.percentile(factors, 90)),
    }


# -- the command -----------------------------------------------------------------------------------
KEYS_SHOWN = [
    ("step_time", "step time"),
    ("ttft", "TTFT"),
    ("tpot", "TPOT"),
    ("e2e", "E2E"),
]


def summary_lines(result: dict) -> list[str]:
    def pct(v) -> str:
        return "-" if v is None else f"{v:.1%}"

    def signed(v) -> str:
        return "-" if v is None else f"{v:+.1%}"

    lines = [f"{result['run']} vs {result['latency_model']}:"]
    for key, label in KEYS_SHOWN:
        line = (
            f"  {label:>9}: median {pct(result.get(f'{key}_median_abs_err'))}, "
            f"p90 {pct(result.get(f'{key}_p90_abs_err'))}"
        )
        if f"{key}_p50_rel_err" in result:  # serving metrics: the distributions' percentiles
            line += (
                f"  (distribution p50 {signed(result[f'{key}_p50_rel_err'])}, "
                f"p90 {signed(result[f'{key}_p90_rel_err'])})"
            )
        lines.append(line)
    lines.append(f"  throughput: {pct(result['throughput_abs_err'])}")
    if "repeat" in result:
        rep = result["repeat"]
        lines.append(
            f"  engine vs its repeat ({rep['run']}): "
            + ", ".join(
                f"{label} median {pct(rep[f'{key}_median_abs_err'])} p90 "
                f"{pct(rep[f'{key}_p90_abs_err'])}"
                for key, label in KEYS_SHOWN[1:]
            )
            + f", throughput {pct(rep['throughput_abs_err'])}"
        )
    lines.append(
        f"  overheads measured here: device time x{result['measured_device_time_scale']:.3f} + "
        f"{result['measured_decode_kv_overhead_s'] * 1e9:.2f} ns/decode KV token, "
        f"{result['measured_step_overhead_s'] * 1e3:.2f} ms/step + "
        f"{result['measured_decode_overhead_s'] * 1e6:.1f} us/decode; a step with a chunk: "
        f"{result['measured_prefill_step_overhead_s'] * 1e3:.2f} ms + "
        f"{result['measured_mixed_decode_overhead_s'] * 1e6:.1f} us/decode + "
        f"{result['measured_chunk_overhead_s'] * 1e6:.0f} us/chunk + "
        f"{result['measured_context_overhead_s'] * 1e9:.0f} ns/context token + "
        f"{result['measured_host_token_overhead_s'] * 1e9:.0f} ns/prefill token; device: "
        f"{result['measured_token_overhead_s'] * 1e6:.2f} us/prefill token, "
        f"{result['measured_mixed_step_floor_s'] * 1e3:.1f} ms graphed / "
        f"{result['measured_eager_step_floor_s'] * 1e3:.1f} ms eager mixed-step floor"
    )
    lines.append(
        f"  cached tokens mismatched: {result['cached_tokens_mismatch']} (replay), "
        f"{result['cached_tokens_mismatch_free_run']} (free run); step compositions "
        f"mismatched: {result['step_composition_mismatch']} of {result['replayed_steps']}"
    )
    return lines


def cmd_validate(args) -> int:
    from reports.output import check_output, write_output

    overhead_from = [Path(p) for p in args.overhead_from or []]
    # Unusable output paths are refused before the work, not after it.
    if args.json:
        check_output(Path(args.json), "--json", f'"schema": "{SCHEMA}"')
    if args.report:
        check_output(Path(args.report), "--report", REPORT_TITLE)
    terms = {
        "shared_page_reads": args.shared_page_reads,
        "ragged_decode": args.ragged_decode,
        "prefill_batch": args.prefill_batch,
    }
    measured_terms = {k: v for k, v in terms.items() if v is not None}
    repeat = None if args.repeat is None else Path(args.repeat)
    result, tables = validate(
        Path(args.run_dir), overhead_from, measured_terms, repeat, args.host_speed
    )
    print("\n".join(summary_lines(result)))
    if args.json:
        text = json.dumps(result, indent=2) + "\n"
        write_output(Path(args.json), text, "--json", signature=f'"schema": "{SCHEMA}"')
        print(f"json: {args.json}")
    if args.report:
        from reports.validation import render_validation

        html = render_validation(result, tables)
        write_output(Path(args.report), html, "--report", signature=REPORT_TITLE)
        print(f"report: {args.report}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("validate", help="compare an engine run with a simulation of it")
    p.add_argument("run_dir", metavar="RUN_DIR", help="an engine run directory (engine/runs/...)")
    p.add_argument("--json", help="write the fidelity numbers here")
    p.add_argument("--report", help="write an HTML report (scatter and CDFs per metric) here")
    p.add_argument(
        "--overhead-from",
        metavar="RUN_DIR",
        nargs="+",
        help="add the overhead terms measured on these engine runs (their steps pooled: probes "
        "of the same model, TP, GPU and graph mode) to the price; give RUN_DIR before it",
    )
    p.add_argument(
        "--repeat",
        metavar="RUN_DIR",
        help="another engine run of the same config: the engine's own run-to-run errors per "
        "metric, beside the simulation's",
    )
    p.add_argument(
        "--shared-page-reads",
        choices=["l2", "hbm"],
        help="price decodes' reads of pages another decode of the step reads (gpu."
        "shared_page_reads; default: as the run's config says)",
    )
    p.add_argument(
        "--ragged-decode",
        choices=["measured", "mean"],
        help="price decode batches of unequal contexts (gpu.ragged_decode; default: as the "
        "run's config says)",
    )
    p.add_argument(
        "--prefill-batch",
        choices=["measured", "sum"],
        help="price a step's prefill chunks as one launch (gpu.prefill_batch; default: as the "
        "run's config says)",
    )
    p.add_argument(
        "--host-speed",
        action="store_true",
        help="replay the host's measured speed (engine/host_speed.csv of the run and of the "
        "--overhead-from probes): each step's host part at the speed of its start",
    )
    p.set_defaults(func=cmd_validate)
