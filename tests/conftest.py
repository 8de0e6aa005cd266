"""Shared fixtures."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests import helpers

# Property tests draw the same examples on every run (CI must not turn red by chance); a new
# search is one `--hypothesis-seed` or profile away.
settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.load_profile("deterministic")


@pytest.fixture
def tiny_config() -> dict:
    """One small node (Llama-3-8B on one H200), short run; override fields per test."""
    return helpers.tiny_config()
