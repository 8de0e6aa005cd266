"""DecodePrices (sim/executor.py) memoises decode-only step prices by (batch size, context sum):
whatever was asked before, in whatever order, and across a reset of the memo, every price is the
latency model's own float for that step (`shape_time_s`), bit for bit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import parse_config
from sim.executor import VECTOR_MIN, DecodePrices
from sim.latency import RooflineLatency, StepShape, make_latency_model

CFG = parse_config({"model": "llama-3-8b", "gpu": "h200", "node": {"num_gpus": 1, "tp": 1}})
MODELS = [make_latency_model(CFG.model, CFG.gpu, 1), RooflineLatency(CFG.model, CFG.gpu, 1)]

spans = st.tuples(
    st.integers(1, 64),  # batch size
    st.integers(0, 200_000),  # first context sum
    st.integers(1, 3 * VECTOR_MIN),  # steps
)


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(range(len(MODELS))),
    asked=st.lists(spans, min_size=1, max_size=12),
    max_entries=st.sampled_from([10, 50, 200_000]),
)
def test_memoised_prices_are_the_models_own(model, asked, max_entries):
    lat = MODELS[model]
    prices = DecodePrices(lat, max_entries=max_entries)
    for size, first, steps in asked:
        sums = range(first, first + size * steps, size)
        got = prices.many(size, sums)
        assert got == [lat.shape_time_s(StepShape([], [], size, s)) for s in sums]


def test_a_repeated_span_is_served_from_the_memo():
    lat = MODELS[0]
    prices = DecodePrices(lat)
    sums = range(3_000, 3_000 + 3 * 40, 3)
    first = prices.many(3, sums)
    assert prices.many(3, sums[5:20]) == first[5:20]
    assert prices._num_entries == 40  # nothing priced twice
