"""Parameter models shared by every policy kind."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class NoParams(BaseModel):
    """A policy without parameters: any given one is an error."""

    model_config = ConfigDict(extra="forbid")
