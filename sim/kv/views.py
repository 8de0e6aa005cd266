"""Read-only views the cache policies decide from (policies/eviction.py, policies/admission.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class PageStats:
    """Per-page arrays an eviction policy reads (indexed by page id)."""

    last_access_s: np.ndarray  # float64: last time a request hit the page or stopped reading it
    created_s: np.ndarray  # float64: when the page was indexed
    hit_count: np.ndarray  # int32: requests that used it since it was indexed (its creator counts)
    depth: np.ndarray  # int32: 1-based position of the page in its prefix
    prefix_pages: np.ndarray  # int32: pages of the longest prefix indexed through it (>= depth)
    page_size: int


@dataclass(slots=True, frozen=True)
class Segment:
    """The part of a request's prompt the cache did not have: computed now, maybe cached after."""

    tokens: int  # new prompt tokens
    already_shared: bool  # it extends a prefix reused from the cache (computed by another request)
    break_even_tokens: int  # sim/kv/rebuild_cost.py: rebuild of a shorter segment costs <= one step
    seen_before: bool = False  # a recently rejected segment began with the same page (same prefix)
