"""One-off: bring the 2026-11-30 H200 runs (written before sim's row writers existed) to the
current run-directory schema, by replaying sim's scheduler with their measured step times.

    python engine/runs/upgrade_schema.py engine/runs/seed_1node [...]

The runs recorded each step's composition as sums (chunks, prefill tokens and context, decodes
and their context, cached tokens) and each request's submit time (`routed_s`). The scheduler is
deterministic given its queue and clock, so the replay (each request joins before the first step
that started after its submit time; each step planned at its recorded start and applied at start
+ measured duration) re-derives what the new columns need: each step's chunks ("new@context"),
`batch_size`, `preempted`, and each request's `scheduled_s` and `queued_step`. Every replayed step
must reproduce the recorded sums exactly, else the run is left as it was. Measured values
(times, durations, cached tokens) are copied from the old files, never from the replay.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from kvsched.validate import run_workload
from policies import make_policy
from sim.config import parse_config
from sim.kv.manager import paged_kv_from_config
from sim.latency import make_latency_model
from sim.metrics import REQUEST_COLUMNS
from sim.scheduler import Scheduler
from sim.sequence import new_sequence
from sim.steps import STEP_COLUMNS, step_row

OLD_REQUEST_COLUMNS = REQUEST_COLUMNS[:16]  # before scheduled_s, queued_step
ENGINE_COLUMNS = ["gpu_s", "prep_s", "sched_s"]


def upgrade(run_dir: Path) -> str:
    arm = run_dir / "engine"
    old_steps = pd.read_csv(arm / "steps.csv")
    if "num_prefill" in old_steps.columns:
        return "already upgraded"
    with open(arm / "requests.csv") as f:
        rows = list(csv.reader(f))[1:]
    old_req = pd.DataFrame([r[:16] for r in rows], columns=OLD_REQUEST_COLUMNS)
    for c in ("request_id", "cached_tokens"):
        old_req[c] = old_req[c].astype(int)
    old_req["routed_s"] = old_req.routed_s.astype(float)
    cfg = parse_config(json.loads((arm / "config.json").read_text()))
    last = int(old_req.request_id.max())
    by_id = {}
    for req in run_workload(cfg).requests:  # ids count up from 0 in stream order
        by_id[req.request_id] = req
        if req.request_id >= last:
            break
    latency = make_latency_model(cfg.model, cfg.gpu, cfg.node.tp)
    scheduler = Scheduler(
        cfg.node,
        paged_kv_from_config(cfg, latency, 0, make_policy),
        make_policy("scheduling", cfg.policies.scheduling),
    )
    starts = old_steps.start_s.to_numpy()
    joins = old_req[old_req.status != "failed"].copy()
    joins["queued_step"] = np.searchsorted(starts, joins.routed_s.to_numpy(), side="left")
    joins = joins.sort_values(["queued_step", "routed_s", "request_id"], kind="stable")
    seqs, cursor, last_end, new_rows = {}, 0, 0.0, []
    joins_list = list(zip(joins.queued_step, joins.request_id, joins.arrival_s, strict=True))
    for k, row in enumerate(old_steps.itertuples(index=False)):
        while cursor < len(joins_list) and joins_list[cursor][0] <= k:
            _, rid, arrival = joins_list[cursor]
            req = by_id[int(rid)]
            seq = new_sequence(req, cfg.cache.page_size, cfg.cache.hash_bits, float(arrival))
            seqs[int(rid)] = seq
            scheduler.add(seq)
            cursor += 1
        if not scheduler.running:
            scheduler.kv.idle_reclaim(last_end)
        step = scheduler.schedule(float(row.start_s))
        r = step_row(0, k, float(row.start_s), float(row.duration_s), step)
        got = (r[4], r[5], r[6], r[7], r[8], r[9])
        want = (row.num_prefill_chunks, row.prefill_tokens, row.prefill_ctx_sum,
                row.num_decodes, row.decode_ctx_sum, row.cached_tokens)  # fmt: skip
        if tuple(int(x) for x in got) != tuple(int(x) for x in want):
            return f"step {k}: replay {got} != recorded {want}: left as it was"
        new_rows.append((*r, row.gpu_s, row.prep_s, row.sched_s))
        last_end = float(row.start_s) + float(row.duration_s)
        scheduler.apply(step, last_end)
    pd.DataFrame(new_rows, columns=STEP_COLUMNS + ENGINE_COLUMNS).to_csv(
        arm / "steps.csv", index=False, float_format="%.6f"
    )
    new_req = old_req.copy()
    new_req["scheduled_s"] = [
        seqs[i].scheduled_s if i in seqs else np.nan for i in old_req.request_id
    ]
    new_req["queued_step"] = [seqs[i].queued_step if i in seqs else -1 for i in old_req.request_id]
    new_req.to_csv(arm / "requests.csv", index=False)
    return f"upgraded: {len(new_rows)} steps reproduced exactly"


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(path, upgrade(Path(path)))
