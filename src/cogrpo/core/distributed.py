"""The ranks of a data-parallel Co-GRPO run, as the trainer sees them (torch.distributed: gloo on CPUs, NCCL on GPUs).

Every rank draws the whole iteration's randomness (prompts, schedule actions, noise seeds) from the same seeded
generators and keeps its contiguous share, so a group never spans ranks and N ranks compute what one process
would; gradients are summed across ranks before clipping (one flat all-reduce, as DDP's buckets do), after each
rank weighted its part of the loss by its share of the global batch. One process is `SINGLE`: no collective runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from cogrpo import shares


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1

    def share(self, n: int) -> slice:
        """This rank's contiguous rows of n (n must divide evenly: whole groups per rank; cogrpo.shares)."""
        return shares.share(n, self.world, self.rank)

    def sum_(self, tensors: list[torch.Tensor]) -> None:
        """Sum each tensor over the ranks, in place: one all-reduce per device and dtype (on GPUs the gradients go
        through NCCL, the CPU-side statistics through gloo)."""
        if self.world == 1 or not tensors:
            return
        buckets: dict[tuple, list[torch.Tensor]] = {}
        for t in tensors:
            buckets.setdefault((t.device, t.dtype), []).append(t)
        for bucket in buckets.values():
            flat = _flatten_dense_tensors(bucket)
            dist.all_reduce(flat)
            for t, reduced in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
                t.copy_(reduced)

    def broadcast_(self, tensors: list[torch.Tensor]) -> None:
        """Every rank's tensors set to rank 0's (the starting weights: no rank relies on its own random init)."""
        if self.world == 1:
            return
        for t in tensors:
            dist.broadcast(t, 0)

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's tensor (same shape on each), concatenated in rank order along dim 0."""
        if self.world == 1:
            return t
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts)


SINGLE = Ranks()


def backend_spec() -> str:
    """The process group's backends: gloo for CPU tensors (the schedule policy, rewards, statistics), NCCL for CUDA
    ones where there are GPUs."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def current() -> Ranks:
    """The ranks of this process group (torchrun's), or SINGLE outside one."""
    if dist.is_available() and dist.is_initialized():
        return Ranks(dist.get_rank(), dist.get_world_size())
    return SINGLE
