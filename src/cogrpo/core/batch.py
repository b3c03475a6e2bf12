"""The grouped batch of one GRPO iteration: B prompts × G trajectories, in one prompt-major layout.

Trajectory i answers prompt i // G. This type is the only place that ordering is written down: rollout,
reward scoring and the update all take their per-trajectory views and their (B, G) groupings from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cogrpo.core.generator import Condition


@dataclass(frozen=True)
class GroupedBatch:
    rows: torch.Tensor  # (B,) rows of the prompts in the prompt set
    cond: Condition  # the prompts' encoding, one row per prompt
    group_size: int  # G

    @property
    def prompts(self) -> int:
        return len(self.rows)

    @property
    def trajectories(self) -> int:
        return len(self.rows) * self.group_size

    def per_trajectory(self, x: torch.Tensor) -> torch.Tensor:
        """A per-prompt tensor (B, …) repeated for each of its G trajectories: (B·G, …)."""
        return x.repeat_interleave(self.group_size, 0)

    def trajectory_cond(self) -> Condition:
        """The condition of every trajectory: (B·G) rows."""
        return self.cond.repeat_interleave(self.group_size)

    def trajectory_rows(self) -> torch.Tensor:
        """(B·G,) the prompt row each trajectory answers."""
        return self.per_trajectory(self.rows)

    def groups(self, x: torch.Tensor) -> torch.Tensor:
        """A per-trajectory tensor (B·G, …) viewed as (B, G, …) groups."""
        return x.view(self.prompts, self.group_size, *x.shape[1:])
