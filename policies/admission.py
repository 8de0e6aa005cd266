"""Admission policies: may a request's freshly computed prompt segment enter the cache pool?

A segment that is not admitted is computed and used as usual, but its pages are not indexed: they
return to the free list when the request ends instead of taking cache space.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from policies.params import NoParams
from sim.kv.views import Segment
from sim.policy_api import AdmissionPolicy

__all__ = ["AdmissionPolicy"]


class Always:
    """Every computed full page is cached."""

    Params = NoParams

    def __init__(self, params: NoParams):
        pass

    def admit(self, segment: Segment) -> bool:
        return True


class ThresholdParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # None: the break-even length from the rebuild cost (sim/kv/rebuild_cost.py).
    min_tokens: int | None = Field(default=None, ge=0)


class Threshold:
    """A segment shorter than min_tokens (default: its rebuild break-even length) is cached only if
    it extends a prefix already shared or was seen before (so it will be reused)."""

    Params = ThresholdParams

    def __init__(self, params: ThresholdParams):
        self.min_tokens = params.min_tokens

    def admit(self, segment: Segment) -> bool:
        threshold = segment.break_even_tokens if self.min_tokens is None else self.min_tokens
        return segment.already_shared or segment.seen_before or segment.tokens >= threshold
