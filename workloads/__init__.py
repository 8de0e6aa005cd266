"""Request streams: the seed benchmark, generators and trace loaders. Knows nothing of nodes."""

from workloads.registry import WORKLOADS, make_workload
from workloads.request import Request, Workload

__all__ = ["Request", "Workload", "WORKLOADS", "make_workload"]
