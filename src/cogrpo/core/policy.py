"""The schedule policy π_φ: per step, a diagonal Gaussian over the four knob residuals (DESIGN.md §1).

Actions live in pre-activation space and move the hand-crafted base schedule (cogrpo.core.schedule), so the
zero-initialised mean reproduces the base. σ = σ_floor + exp(log_std) keeps exploration from collapsing
while staying smooth in log_std.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cogrpo.core.schedule import apply_actions

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class SchedulePolicy(nn.Module):
    def __init__(self, base_knobs: torch.Tensor, sigma_init: float = 0.3, sigma_floor: float = 0.05):
        super().__init__()
        if sigma_init <= sigma_floor:
            raise ValueError(f"sigma_init ({sigma_init}) must exceed sigma_floor ({sigma_floor})")
        self.sigma_floor = sigma_floor
        self.register_buffer("base", base_knobs.clone())
        self.mean = nn.Parameter(torch.zeros_like(base_knobs))
        self.log_std = nn.Parameter(torch.full_like(base_knobs, math.log(sigma_init - sigma_floor)))

    @property
    def steps(self) -> int:
        return len(self.base)

    def std(self) -> torch.Tensor:
        return self.sigma_floor + self.log_std.exp()

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """(n, T, 4) actions."""
        noise = torch.randn(n, *self.base.shape, generator=generator)
        return (self.mean + self.std() * noise).detach()

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """(n, T) log-density of each step's 4-dim action."""
        std = self.std()
        z = (actions - self.mean) / std
        return (-0.5 * z**2 - std.log() - LOG_SQRT_2PI).sum(-1)

    def knobs(self, actions: torch.Tensor) -> torch.Tensor:
        """Knob values (…, T, 4) the sampler takes, for actions (…, T, 4)."""
        return apply_actions(self.base, actions)

    def deterministic_knobs(self) -> torch.Tensor:
        """The evaluation schedule: actions at the mean."""
        return apply_actions(self.base, self.mean.detach())
