"""Admission policies: may a request's freshly computed prompt segment enter the cache pool?"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict


class AdmissionPolicy(Protocol):
    def admit(self, segment_tokens: int, already_shared: bool) -> bool:
        """True to index the segment's pages for reuse; False frees them when the request ends."""
        ...


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Always:
    """Every computed full page is cached."""

    Params = NoParams

    def __init__(self, params: NoParams):
        pass

    def admit(self, segment_tokens: int, already_shared: bool) -> bool:
        return True
