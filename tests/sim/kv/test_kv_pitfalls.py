"""The three pitfall studies, shortened: the broken arm shows the failure, the fixed arm does not."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kvsched.experiment import resolve_arms, run_arm
from sim.config import load_config_file

STUDIES = Path(__file__).resolve().parents[3] / "studies"


def run(
    study: str, arms: list[str], duration_s: float, node: dict | None = None, **workload
) -> dict[str, tuple[dict, pd.DataFrame]]:
    raw = load_config_file(STUDIES / f"{study}.yaml")
    raw["duration_s"] = duration_s
    raw["workload"]["params"].update(workload)
    raw["node"] = {**raw.get("node", {}), **(node or {})}
    out = {}
    for arm, cfg in resolve_arms(raw, arms).items():
        _, summary, requests, _ = run_arm(cfg, arm, show_progress=False)
        out[arm] = (summary, requests)
    return out


def test_false_hit_study():
    res = run(
        "pitfall_false_hit", ["hash_only/12", "two_level/12", "two_level/64"], 40.0, num_clients=8
    )
    broken, fixed, wide = (res[a][0] for a in ["hash_only/12", "two_level/12", "two_level/64"])
    assert broken["false_hits"] > 0 and broken["wrong_reuse_tokens"] > 0
    assert fixed["false_hits"] > 0 and fixed["wrong_reuse_tokens"] == 0
    assert wide["false_hits"] == 0
    requests = res["two_level/12"][1]
    assert (requests.wrong_reuse_tokens == 0).all() and requests.false_hits.sum() == fixed[
        "false_hits"
    ]
    # Level 2 catches every collision, so the 12-bit index behaves exactly like the 64-bit one.
    assert fixed["prefix_hit_rate"] == wide["prefix_hit_rate"]


def test_refcount_race_study():
    # A smaller pool (~69K tokens) so the cache is full, and pages are recycled, within a minute.
    res = run(
        "pitfall_refcount_race", ["immediate", "epoch"], 60.0, node={"kv_memory_fraction": 0.56}
    )
    immediate, epoch = res["immediate"][0], res["epoch"][0]
    assert immediate["use_after_free"] > 0 and immediate["peak_retired_kv_bytes"] == 0
    assert epoch["use_after_free"] == 0 and epoch["peak_retired_kv_bytes"] > 0
    assert res["immediate"][1].use_after_free.sum() == immediate["use_after_free"]


def long_hit_rate(requests: pd.DataFrame) -> float:
    long = requests[(requests.tag == "long") & (requests.status == "finished")]
    return float(long.cached_tokens.sum() / long.prompt_tokens.sum())


def test_pollution_study():
    res = run("pitfall_pollution", ["lru", "lru+protected", "scored"], 250.0)
    lru, zone, scored = (long_hit_rate(res[a][1]) for a in ["lru", "lru+protected", "scored"])
    # Measured with generated tokens cached (cache_outputs, the default): 0.12, 0.22, 0.81. The
    # one-off requests' answers pollute too, so LRU and the zone lose more than with prompts
    # only (0.46, 0.63, 0.83); scored eviction keeps the long prefixes either way.
    assert zone > lru + 0.08 and scored > lru + 0.6
    assert res["lru+protected"][0]["protected_pages"] > 0 and res["lru"][0]["protected_pages"] == 0
