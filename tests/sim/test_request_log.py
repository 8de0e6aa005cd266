"""The run's request log (sim/request_log.py) lets go of each request's objects once it is over and
keeps its fields as a row: read back, every field of every request is what a run that keeps the
objects to the end has (so nothing writes to a request after it is closed), and requests.csv is
the same frame; across closed and open loops, failures at dispatch, rejections and crashes
(issue 18)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from kvsched.experiment import resolve_arms, run_arm
from sim.config import parse_config
from sim.metrics import request_frame
from sim.request_log import _FLAGS, _FLOATS, _INTS, FinishedSequence, RequestLog
from sim.sequence import Sequence
from tests.sim.test_on_oom import CLOSED, OPEN, fragmented

ROOT = Path(__file__).resolve().parents[2]
SHORT = {"name": "seed", "params": {"num_clients": 16, "output_min": 8, "output_max": 64}}
LONG = {**SHORT, "params": {**SHORT["params"], "long_share": 0.5}}
REQUEST_FIELDS = ("request_id", "output_tokens", "arrival_s", "session_id", "priority", "tag")


def fields(seq: Sequence | FinishedSequence) -> str:
    """Every field a row keeps, as text (repr: floats exactly, NaN equal to NaN)."""
    own = tuple(getattr(seq, name) for name in (*_FLOATS, *_INTS, *_FLAGS))
    return repr((seq.status, *own, *(getattr(seq.req, name) for name in REQUEST_FIELDS)))


def vidur_case(max_requests: int) -> dict:
    raw = yaml.safe_load((ROOT / "studies" / "vidur_case.yaml").read_text())
    raw["workload"]["params"] |= {"max_requests": max_requests}
    raw["workload"]["params"]["path"] = str(ROOT / raw["workload"]["params"]["path"])
    return {**raw, "duration_s": 40}


CASES = {
    "engine-closed-loop": (
        {"duration_s": 20, "cluster": {"num_nodes": 2}, "workload": SHORT},
        "engine",
    ),
    "openclaw-fail-at-dispatch": (
        {"duration_s": 20, "cache": {"max_model_len": 16384}, "workload": LONG},
        "openclaw",
    ),
    # closed-loop clients send a crashed node's requests again; open-loop ones fail
    "crash-closed-loop": (fragmented("crash", CLOSED), None),
    "crash-open-loop": (fragmented("crash", OPEN), None),
    "reject": (fragmented("reject", CLOSED), None),
}


def run(raw: dict, arm: str | None) -> tuple[RequestLog, pd.DataFrame, dict]:
    cfg = parse_config(raw) if arm is None else resolve_arms(raw, [arm])[arm]
    cluster, summary, requests, _ = run_arm(cfg, arm or "arm", show_progress=False)
    return cluster.sequences, requests, summary


@pytest.mark.parametrize("case", [*CASES, "vidur-open-loop"])
def test_rows_read_back_as_the_objects_kept_to_the_end(case, monkeypatch):
    if case == "vidur-open-loop":
        raw = vidur_case(300)
        if not Path(raw["workload"]["params"]["path"]).exists():
            pytest.skip("the Azure trace is not here (../shared/traces)")
        arm = "paged"
    else:
        raw, arm = CASES[case]
    log, requests, summary = run(raw, arm)
    if case.startswith("crash"):
        assert summary["crashes"] > 0 and (summary["failed"] > 0) == case.endswith("open-loop")
    if case in ("reject", "openclaw-fail-at-dispatch"):
        assert summary["failed"] > 0
    with monkeypatch.context() as patch:
        patch.setattr(RequestLog, "close", lambda self, seq: None)  # every object kept
        kept, kept_requests, _ = run(raw, arm)
    closed = [seq for seq in log if isinstance(seq, FinishedSequence)]
    assert (
        closed and len(log) == len(kept) and not any(isinstance(s, FinishedSequence) for s in kept)
    )
    assert [fields(a) for a in log] == [fields(b) for b in kept]
    pd.testing.assert_frame_equal(requests, kept_requests, check_exact=True)
    assert request_frame(log, "a").equals(request_frame(list(log), "a"))


def test_a_log_reads_by_index_and_in_dispatch_order():
    log, _, _ = run(*CASES["engine-closed-loop"])
    rows = list(log)
    assert [log[i] for i in range(len(log))] == rows and log[-1] == rows[-1]
    assert log.live() == [seq for seq in rows if isinstance(seq, Sequence)]
    assert [s.req.request_id for s in rows] == sorted(s.req.request_id for s in rows)
    with pytest.raises(IndexError):
        log[len(log)]
