"""Workload registry: name -> (params model, factory). Adding a workload is one line here."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pydantic import BaseModel, ValidationError

from sim.config import ConfigError, format_validation_error
from workloads.request import Workload
from workloads.seed import SeedParams, make_seed

WORKLOADS: dict[str, tuple[type[BaseModel], Callable[..., Workload]]] = {
    "seed": (SeedParams, make_seed),
}


def make_workload(name: str, params: dict, rng: np.random.Generator) -> Workload:
    if name not in WORKLOADS:
        raise ConfigError(f"workload.name: unknown workload {name!r}; allowed: {', '.join(sorted(WORKLOADS))}")
    params_model, factory = WORKLOADS[name]
    try:
        parsed = params_model.model_validate(params)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix="workload.params.")) from None
    return factory(parsed, rng)
