"""The decode batch terms through the whole node loop: with shared page reads priced through L2
and ragged batches priced as measured, the default driver (decode spans priced by the batch
executors' `decode_span_prices`) gives what the step-by-step reference gives, for the plain and
the cascade decode kernels."""

from __future__ import annotations

import pytest

from tests.sim.test_event_driver import assert_same, run_both

TERMS = {"gpu": {"preset": "h200", "shared_page_reads": "l2", "ragged_decode": "measured"}}


@pytest.mark.parametrize("arm", ["engine", "engine+cascade"])
def test_the_default_study_with_both_terms_is_the_same_both_ways(arm):
    ref, fast = run_both({"duration_s": 60, **TERMS}, arm)
    assert_same(ref, fast)
    spans = fast[6]
    assert spans > 0  # the spans ran (and were priced by the batch executor)
