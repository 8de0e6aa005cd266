"""kvsched simulator: SimPy mechanisms for nodes, routers and KV caches."""

from sim.native import use_sources_unless_current

__version__ = "0.1.0"
# The hot modules run compiled (sim/native.py) when built from their current sources.
NATIVE = use_sources_unless_current()
