"""Name -> policy class, one dict per kind. A policy class has `Params` (pydantic) and a
constructor taking the parsed params (routing policies also take the run's rng)."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import ValidationError

from policies import admission, eviction, placement, routing, routing_approx, scheduling
from sim.config import ConfigError, PolicySpec, format_validation_error
from sim.strict_input import number_error

ROUTING = {
    "round_robin": routing.RoundRobin,
    "least_loaded": routing.LeastLoaded,
    "prefix_affinity": routing.PrefixAffinity,
    "random": routing.Random,
    "least_kv": routing.LeastKV,
    "kv_cost": routing.KVCost,
    "weighted_scorers": routing.WeightedScorers,
    "sglang_cache_aware": routing_approx.SGLangCacheAware,
    "decentralized": routing_approx.Decentralized,
}
EVICTION = {
    "lru": eviction.LRU,
    "lfu": eviction.LFU,
    "fifo": eviction.FIFO,
    "scored": eviction.Scored,
}
ADMISSION = {
    "always": admission.Always,
    "threshold": admission.Threshold,
}
SCHEDULING = {
    "newest": scheduling.Newest,
    "longest_context": scheduling.LongestContext,
}
PLACEMENT = {"spill": placement.Spill, "shard": placement.Shard}
# Kinds chosen in the config's `policies:` section; placement is chosen by `placement.policy`.
CONFIG_KINDS = ("routing", "eviction", "admission", "scheduling")
REGISTRY: dict[str, dict[str, Any]] = {  # kind -> name -> policy class
    "routing": ROUTING,
    "eviction": EVICTION,
    "admission": ADMISSION,
    "scheduling": SCHEDULING,
    "placement": PLACEMENT,
}


def make_policy(kind: str, spec: PolicySpec, rng: np.random.Generator | None = None):
    table = REGISTRY[kind]
    if spec.name not in table:
        raise ConfigError(
            f"policies.{kind}.name: unknown policy {spec.name!r}; allowed: {', '.join(sorted(table))}"
        )
    cls = table[spec.name]
    found = number_error(cls.Params, spec.params)
    if found:
        raise ConfigError(f"policies.{kind}.params.{found}")
    try:
        params = cls.Params.model_validate(spec.params)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix=f"policies.{kind}.params.")) from None
    return cls(params, rng) if kind == "routing" else cls(params)
