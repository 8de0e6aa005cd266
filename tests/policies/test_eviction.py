"""Eviction policies: exact priorities on hand-built page statistics; bad parameters fail by name."""

from __future__ import annotations

import numpy as np
import pytest

from policies import make_policy
from policies.eviction import FIFO, LFU, LRU, NoParams, Scored, ScoredParams
from sim.config import ConfigError, PolicySpec
from sim.kv.views import PageStats

PAGES = np.array([0, 1, 2])


def stats() -> PageStats:
    return PageStats(
        last_access_s=np.array([10.0, 70.0, 40.0]),
        created_s=np.array([5.0, 1.0, 3.0]),
        hit_count=np.array([8, 1, 2]),
        depth=np.array([1, 2, 1]),
        prefix_pages=np.array([128, 2, 64]),
        page_size=16,
    )


def test_lru_lfu_fifo_orders():
    s = stats()
    assert list(np.argsort(LRU(NoParams()).priority(s, PAGES, 100.0))) == [0, 2, 1]
    assert list(np.argsort(LFU(NoParams()).priority(s, PAGES, 100.0))) == [1, 2, 0]
    assert list(np.argsort(FIFO(NoParams()).priority(s, PAGES, 100.0))) == [1, 2, 0]


def test_scored_is_frequency_times_decay_plus_prefix_length_weight():
    s = stats()
    got = Scored(ScoredParams(half_life_s=30.0, length_weight=0.5)).priority(s, PAGES, 100.0)
    # page 0: 8 hits, idle 90 s = 3 half-lives -> 1.0; 2048-token prefix -> + 0.5 * 2.048
    # page 1: 1 hit, idle 30 s -> 0.5; 32 tokens -> + 0.016
    # page 2: 2 hits, idle 60 s -> 0.5; 1024 tokens -> + 0.512
    assert got == pytest.approx([1.0 + 1.024, 0.5 + 0.016, 0.5 + 0.512])
    assert list(np.argsort(got)) == [1, 2, 0]


def test_scored_ignores_a_future_access_time():
    s = stats()
    got = Scored(ScoredParams(half_life_s=30.0, length_weight=0.0)).priority(s, PAGES, 0.0)
    assert got == pytest.approx([8.0, 1.0, 2.0])


@pytest.mark.parametrize(
    "params, field",
    [
        ({"length_weight": -1}, "policies.eviction.params.length_weight"),
        ({"half_life_s": 0}, "policies.eviction.params.half_life_s"),
        ({"weight": 1}, "policies.eviction.params.weight"),
    ],
)
def test_bad_scored_params_name_the_field(params, field):
    with pytest.raises(ConfigError, match=field):
        make_policy("eviction", PolicySpec(name="scored", params=params))


def test_unknown_policy_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="allowed: fifo, lfu, lru, scored"):
        make_policy("eviction", PolicySpec(name="arc"))
