"""requests.csv's and timeseries.csv's frames are built a column at a time (sim/metrics.py
`request_frame` and `Recorder`, for memory at hundreds of nodes): each must be the frame pandas
builds from one tuple per row, values and dtypes alike, for finished, failed and unfinished
requests, and for no rows (issue 18)."""

from __future__ import annotations

import pandas as pd
import pytest

from kvsched.experiment import resolve_arms, run_arm
from sim.metrics import REQUEST_COLUMNS, SERIES_COLUMNS, Recorder, request_frame


def by_rows(sequences, arm: str) -> pd.DataFrame:
    """The frame as pandas infers it from one tuple per request (how it used to be built)."""
    rows = [
        (
            s.req.request_id,
            arm,
            s.node,
            s.req.tag,
            s.arrival_s,
            s.first_token_s,
            s.finish_s,
            s.prompt_tokens,
            s.cached_tokens,
            s.num_generated,
            s.preemptions,
            s.false_hits,
            s.wrong_reuse_tokens,
            s.status.value,
            s.routed_s,
            s.use_after_free,
            s.scheduled_s,
            s.queued_step,
        )
        for s in sequences
    ]
    return pd.DataFrame(rows, columns=REQUEST_COLUMNS)


# short answers: some requests finish within seconds, some are in flight at the end
SHORT = {"name": "seed", "params": {"num_clients": 16, "output_min": 8, "output_max": 64}}


@pytest.mark.parametrize(
    "raw, arm",
    [
        ({"duration_s": 20, "cluster": {"num_nodes": 2}, "workload": SHORT}, "engine"),
        (  # the article's baseline (contiguous): long requests past max_model_len fail at once
            {
                "duration_s": 20,
                "cache": {"max_model_len": 16384},
                "workload": {**SHORT, "params": {**SHORT["params"], "long_share": 0.5}},
            },
            "openclaw",
        ),
    ],
    ids=["engine", "openclaw-with-failures"],
)
def test_the_columns_are_the_row_tuples_frame(raw, arm, monkeypatch):
    rows: list[tuple] = []
    append = Recorder._append
    monkeypatch.setattr(
        Recorder, "_append", lambda self, row: (rows.append(row), append(self, row))
    )
    cfg = resolve_arms(raw, [arm])[arm]
    cluster, _, _, series = run_arm(cfg, arm, show_progress=False)
    expected_series = pd.DataFrame(rows, columns=SERIES_COLUMNS)
    pd.testing.assert_frame_equal(series, expected_series, check_exact=True)
    assert series.to_csv(index=False) == expected_series.to_csv(index=False)
    statuses = {s.status.value for s in cluster.sequences}
    assert {"finished", "unfinished"} <= statuses
    assert ("failed" in statuses) == (arm == "openclaw")
    expected = by_rows(cluster.sequences, arm)
    got = request_frame(iter(cluster.sequences), arm)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert got.to_csv(index=False) == expected.to_csv(index=False)


def test_no_requests_give_the_empty_frame():
    pd.testing.assert_frame_equal(request_frame([], "engine"), by_rows([], "engine"))


def test_a_value_no_typed_array_holds_turns_its_column_into_a_list():
    recorder = Recorder(cfg=None)  # type: ignore[arg-type]
    rest = (*range(2, 11), 0.5, *range(12, len(SERIES_COLUMNS)))  # load (column 11) a float
    rows = [(0.0, 1, *rest), (1.0, 2**63, *rest), (2.0, 1.5, *rest)]
    for row in rows:
        recorder._append(row)
    assert isinstance(recorder.columns[1], list) and recorder.columns[1] == [1, 2**63, 1.5]
    pd.testing.assert_frame_equal(recorder.series(), pd.DataFrame(rows, columns=SERIES_COLUMNS))
    empty = Recorder(cfg=None).series()  # type: ignore[arg-type]
    pd.testing.assert_frame_equal(empty, pd.DataFrame([], columns=SERIES_COLUMNS))
