"""Decisions behind small Protocols: routing, eviction priority, cache admission.

Each kind has a plain dict registry; `make_policy(kind, spec)` builds one by name and fails
with the list of valid names. Adding a policy is one class and one registry line.
"""

from policies.registry import REGISTRY, make_policy

__all__ = ["REGISTRY", "make_policy"]
