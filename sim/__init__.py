"""kvsched simulator: SimPy mechanisms for nodes, routers and KV caches."""

__version__ = "0.1.0"
