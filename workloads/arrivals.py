"""Arrival processes for the generators: closed loop, Poisson, or gamma with a burstiness knob.

Closed loop: `num_clients` clients each send their next request when the previous one finishes.
Open loop: request k arrives at the sum of k inter-arrival gaps (the first at t = 0); Poisson gaps
are exponential with mean 1/rate; gamma gaps have mean 1/rate and coefficient of variation `cv`
(shape 1/cv^2, scale cv^2/rate): cv = 1 is Poisson, cv > 1 burstier, cv < 1 smoother.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.request import Request, Workload
from sim.strict_input import MAX_CLIENTS

_CHUNK = 1024  # gaps drawn per numpy call


class ArrivalFields(BaseModel):
    """Fields every generator's params share (mixed in by subclassing)."""

    model_config = ConfigDict(extra="forbid")
    arrival: Literal["closed", "poisson", "gamma"] = "closed"
    num_clients: int = Field(default=64, gt=0, le=MAX_CLIENTS)  # closed loop only
    rate: float | None = Field(default=None, gt=0)  # req/s, open loop
    cv: float = Field(default=1.0, gt=0)  # gamma only: std/mean of the inter-arrival gaps

    @model_validator(mode="after")
    def _arrival_fields(self) -> ArrivalFields:
        if self.arrival != "closed" and self.rate is None:
            raise ValueError(f"arrival {self.arrival} needs rate (requests per second)")
        if self.arrival != "closed" and "num_clients" in self.model_fields_set:
            raise ValueError("num_clients applies to arrival closed; open loop uses rate")
        if self.arrival == "closed" and self.rate is not None:
            raise ValueError(
                "rate applies to arrival poisson or gamma; closed loop uses num_clients"
            )
        if self.arrival != "gamma" and self.cv != 1.0:
            raise ValueError("cv applies to arrival gamma only")
        return self


def gaps(kind: str, rate: float, cv: float, rng: np.random.Generator) -> Iterator[float]:
    """Endless inter-arrival gaps in seconds."""
    while True:
        if kind == "poisson":
            chunk = rng.exponential(1.0 / rate, size=_CHUNK)
        else:
            chunk = rng.gamma(1.0 / cv**2, cv**2 / rate, size=_CHUNK)
        yield from chunk.tolist()


def timed(
    requests: Iterator[Request], p: ArrivalFields, rng: np.random.Generator
) -> Iterator[Request]:
    """Stamp each request with its open-loop arrival time."""
    assert p.rate is not None  # open loop: the validator requires rate
    t = 0.0
    gap = gaps(p.arrival, p.rate, p.cv, rng)
    for req in requests:
        req.arrival_s = t
        yield req
        t += next(gap)


def make_stream(
    name: str, requests: Iterator[Request], p: ArrivalFields, rng: np.random.Generator, info: dict
) -> Workload:
    """The workload for `requests` under p's arrival process (rng: the arrival stream's own)."""
    if p.arrival == "closed":
        return Workload(name, requests, num_clients=p.num_clients, info=info)
    return Workload(name, timed(requests, p, rng), num_clients=None, info=info)
