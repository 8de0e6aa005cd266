"""Workload registry: name -> (params model, factory). Adding a workload is one line here."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pydantic import BaseModel, ValidationError

from sim.config import ConfigError, format_validation_error
from sim.request import Workload
from sim.strict_input import number_error
from workloads.generators import (
    NoSharingParams,
    SharedPrefixGroupsParams,
    make_no_sharing,
    make_shared_prefix_groups,
)
from workloads.long_context import LongContextParams, make_long_context
from workloads.multi_turn import MultiTurnParams, make_multi_turn
from workloads.pollution import PollutionParams, make_pollution
from workloads.seed import SeedParams, make_seed
from workloads.trace import TraceParams, make_trace

WORKLOADS: dict[str, tuple[type[BaseModel], Callable[..., Workload]]] = {
    "seed": (SeedParams, make_seed),
    "trace": (TraceParams, make_trace),
    "shared_prefix_groups": (SharedPrefixGroupsParams, make_shared_prefix_groups),
    "multi_turn": (MultiTurnParams, make_multi_turn),
    "pollution": (PollutionParams, make_pollution),
    "no_sharing": (NoSharingParams, make_no_sharing),
    "long_context": (LongContextParams, make_long_context),
}


def make_workload(name: str, params: dict, rng: np.random.Generator) -> Workload:
    if name not in WORKLOADS:
        raise ConfigError(
            f"workload.name: unknown workload {name!r}; allowed: {', '.join(sorted(WORKLOADS))}"
        )
    params_model, factory = WORKLOADS[name]
    found = number_error(params_model, params)
    if found:
        raise ConfigError(f"workload.params.{found}")
    try:
        parsed = params_model.model_validate(params)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix="workload.params.")) from None
    return factory(parsed, rng)
