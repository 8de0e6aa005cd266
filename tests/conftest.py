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


def pytest_collection_modifyitems(config, items):
    """Tests marked `pure` patch a class sim/native.py compiles (a compiled class cannot be
    patched): with the compiled modules in use they skip, and `make test` runs them again on
    the sources (KVSCHED_PURE=1)."""
    import sim

    if not sim.NATIVE:
        return
    skip = pytest.mark.skip(reason="patches a compiled class: run with KVSCHED_PURE=1")
    for item in items:
        if "pure" in item.keywords:
            item.add_marker(skip)
