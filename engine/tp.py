"""Tensor parallelism across processes: rank 0 drives, every rank computes its shard.

Rank 0 owns the scheduler, the KV manager and the clock; each step it broadcasts the step's
work (token ids, positions, block tables: the `SeqWork` list) to the other ranks, and then every
rank runs the same forward on its shard of the weights and of the KV pool (PagedModel's
all-reduces and vocabulary all-gather keep them in step). A `None` broadcast ends the followers.

The step goes over a control group of its own, on gloo (CPU, through the host), not over the
NCCL group the model's collectives use: a pickled object sent through NCCL is copied to the
device, broadcast on the collective stream behind the previous step's all-reduces and copied
back with a device sync on every follower, every step. That is how serving engines pass their
per-step metadata too (a CPU group beside the device group).

Every rank runs the step through its own `StepForward` (engine/runner.py), whose choice of path
(decode graph, piecewise graphs, eager) depends only on the works: the ranks replay the same
graphs, with their NCCL collectives, in lock-step. Graphs are captured by all ranks together,
between two `follow` phases (engine_run: warm-up, capture, serve).

Launch one process per GPU (torchrun, NCCL); with gloo it runs on CPU (tests/engine/test_tp.py).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from engine.batch import SeqWork
from engine.model import PagedModel
from engine.runner import StepForward


class TensorParallelRunner:
    def __init__(
        self,
        model: PagedModel,
        group=None,
        forward: StepForward | None = None,
        control_group=None,
    ):
        self.model, self.group = model, group
        self.control = control_group if control_group is not None else group
        self.step_forward = forward or StepForward(model)
        self.rank = dist.get_rank(group)

    def send(self, works: list[SeqWork]) -> None:
        """Rank 0: send the step to the followers (before running its own shard of it)."""
        assert self.rank == 0, "only rank 0 schedules"
        dist.broadcast_object_list([works], src=0, group=self.control)

    def forward(self, works: list[SeqWork]) -> torch.Tensor:
        """Rank 0: send the step to the followers, then run this rank's shard of it."""
        self.send(works)
        return self.step_forward(works)

    def follow(self) -> int:
        """Ranks > 0: run every step rank 0 sends until it stops; returns the steps run."""
        steps = 0
        while True:
            box: list = [None]
            dist.broadcast_object_list(box, src=0, group=self.control)
            if box[0] is None:
                return steps
            self.step_forward(box[0])
            steps += 1

    def stop(self) -> None:
        dist.broadcast_object_list([None], src=0, group=self.control)
