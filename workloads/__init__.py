"""Request streams: the seed benchmark, generators and trace loaders. Knows nothing of nodes."""

from sim.request import Request, Workload
from workloads.registry import WORKLOADS, make_workload

__all__ = ["Request", "Workload", "WORKLOADS", "make_workload"]
