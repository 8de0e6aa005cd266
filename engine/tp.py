"""Tensor parallelism across processes: rank 0 drives, every rank computes its shard.

Rank 0 owns the scheduler, the KV manager and the clock; each step it broadcasts the step's
work (token ids, positions, block tables: the `SeqWork` list) to the other ranks, and then every
rank runs the same forward on its shard of the weights and of the KV pool (PagedModel's
all-reduces and vocabulary all-gather keep them in step). A `None` broadcast ends the followers.

Launch one process per GPU (torchrun, NCCL); with gloo it runs on CPU (tests/engine/test_tp.py).
Decode CUDA graphs are not used under TP yet: every rank would have to replay in lock-step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from engine.batch import SeqWork
from engine.model import PagedModel


class TensorParallelRunner:
    def __init__(self, model: PagedModel, group=None):
        self.model, self.group = model, group
        self.rank = dist.get_rank(group)

    def forward(self, works: list[SeqWork]) -> torch.Tensor:
        """Rank 0: send the step to the followers, then run this rank's shard of it."""
        assert self.rank == 0, "only rank 0 schedules"
        dist.broadcast_object_list([works], src=0, group=self.group)
        return self.model.forward(self.model.prepare(works))

    def follow(self) -> int:
        """Ranks > 0: run every step rank 0 sends until it stops; returns the steps run."""
        steps = 0
        while True:
            box: list = [None]
            dist.broadcast_object_list(box, src=0, group=self.group)
            if box[0] is None:
                return steps
            self.model.forward(self.model.prepare(box[0]))
            steps += 1

    def stop(self) -> None:
        dist.broadcast_object_list([None], src=0, group=self.group)
