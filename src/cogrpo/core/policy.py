"""The schedule policy π_φ: per step, a diagonal Gaussian over the four knob residuals (DESIGN.md §1).

Actions live in pre-activation space and move the hand-crafted base schedule (cogrpo.core.schedule), so the
zero-initialised mean reproduces the base. σ = σ_floor + exp(log_std) keeps exploration from collapsing
while staying smooth in log_std. Knobs the policy does not move (train.schedule_knobs) get action 0, always: they
are left out of the log-prob, so nothing learns them. `PromptSchedulePolicy` also reads the prompt: its mean per
step is moved by a linear read-out of the prompt's pooled text features (train.schedule_policy: prompt).
`ProgressSchedulePolicy` is another policy read at a different step count through decoding progress
(train.share_schedule): one schedule for every step count trained.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from cogrpo.core.schedule import KNOBS, apply_actions, progress_weights

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class SchedulePolicy(nn.Module):
    conditioned = False  # reads no prompt: every method's context is ignored

    def __init__(self, base_knobs: torch.Tensor, sigma_init: float = 0.3, sigma_floor: float = 0.05,
                 knobs: tuple[str, ...] | list[str] = KNOBS):
        super().__init__()
        if sigma_init <= sigma_floor:
            raise ValueError(f"sigma_init ({sigma_init}) must exceed sigma_floor ({sigma_floor})")
        self.sigma_floor = sigma_floor
        self.register_buffer("base", base_knobs.clone())
        # 1 for a knob the policy moves, 0 for one held at the base (not saved: it is the config's)
        self.register_buffer("moves", torch.tensor([float(k in knobs) for k in KNOBS]), persistent=False)
        self.mean = nn.Parameter(torch.zeros_like(base_knobs))
        self.log_std = nn.Parameter(torch.full_like(base_knobs, math.log(sigma_init - sigma_floor)))

    @property
    def steps(self) -> int:
        return len(self.base)

    def std(self) -> torch.Tensor:
        return self.sigma_floor + self.log_std.exp()

    def mean_for(self, context: torch.Tensor | None = None) -> torch.Tensor:
        """The mean action, (T, 4), or (n, T, 4) for n prompts' features (n, F) where the policy reads them."""
        return self.mean

    def noise(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """(n, T, 4) standard normal draws: what `act` turns into actions."""
        return torch.randn(n, *self.base.shape, generator=generator)

    def act(self, noise: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """(n, T, 4) actions from noise (n, T, 4), for the n trajectories' prompt features."""
        return ((self.mean_for(context) + self.std() * noise) * self.moves).detach()

    def sample(self, n: int, generator: torch.Generator | None = None,
               context: torch.Tensor | None = None) -> torch.Tensor:
        """(n, T, 4) actions."""
        return self.act(self.noise(n, generator), context)

    def log_prob(self, actions: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """(n, T) log-density of each step's 4-dim action."""
        std = self.std()
        z = (actions - self.mean_for(context)) / std
        return ((-0.5 * z**2 - std.log() - LOG_SQRT_2PI) * self.moves).sum(-1)

    def knobs(self, actions: torch.Tensor) -> torch.Tensor:
        """Knob values (…, T, 4) the sampler takes, for actions (…, T, 4)."""
        return apply_actions(self.base, actions)

    def deterministic_knobs(self, context: torch.Tensor | None = None) -> torch.Tensor:
        """The evaluation schedule: actions at the mean; (n, T, 4), one per prompt, for a conditioned policy given
        the prompts' features, else (T, 4) (a conditioned policy without features: its per-step part)."""
        return apply_actions(self.base, (self.mean_for(context) * self.moves).detach())


class PromptSchedulePolicy(SchedulePolicy):
    """π_φ(a_t | prompt): the per-step mean plus a linear read-out of the prompt's pooled text features (layer-
    normalised without affine, so the read-out sees unit-scale inputs whatever the encoder), zero-initialised so
    training starts at the per-step policy; σ stays per step. Exact log-probs: a Gaussian whose mean is a function
    of the prompt."""

    conditioned = True

    def __init__(self, base_knobs: torch.Tensor, features: int, sigma_init: float = 0.3, sigma_floor: float = 0.05,
                 knobs: tuple[str, ...] | list[str] = KNOBS):
        super().__init__(base_knobs, sigma_init, sigma_floor, knobs)
        self.head = nn.Linear(features, base_knobs.numel())
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def mean_for(self, context: torch.Tensor | None = None) -> torch.Tensor:
        if context is None:
            return self.mean
        z = F.layer_norm(context.float(), context.shape[-1:])
        return self.mean + self.head(z).view(-1, *self.base.shape)


class ProgressSchedulePolicy(SchedulePolicy):
    """A policy over T' steps that owns no parameters: the mean and σ of `source` (over its T steps), linearly
    interpolated over decoding progress (the weights `transfer` carries a learned schedule with), acting on its own
    base schedule. Exact log-probs (a Gaussian whose mean and σ are linear in the source's); its gradients reach
    the source, so training at T' trains the one schedule every step count shares."""

    def __init__(self, source: SchedulePolicy, base_knobs: torch.Tensor):
        nn.Module.__init__(self)  # not SchedulePolicy's: no mean or log_std of its own (std and mean_for read source)
        self.sources = [source]  # a plain list: the source's parameters are not this module's (nor saved twice)
        self.sigma_floor = source.sigma_floor
        self.conditioned = source.conditioned
        self.register_buffer("base", base_knobs.clone())
        self.register_buffer("moves", source.moves.clone(), persistent=False)
        self.register_buffer("weights", progress_weights(source.steps, len(base_knobs)), persistent=False)

    def std(self) -> torch.Tensor:
        return self.weights @ self.sources[0].std()

    def mean_for(self, context: torch.Tensor | None = None) -> torch.Tensor:
        return self.weights @ self.sources[0].mean_for(context)


def save_prompt_policy(policy: PromptSchedulePolicy, path) -> None:
    """The whole policy (base, per-step mean and std, read-out) as safetensors; its shape in the metadata."""
    from safetensors.torch import save_file

    moved = ",".join(k for k, m in zip(KNOBS, policy.moves) if m)
    save_file({k: v.contiguous() for k, v in policy.state_dict().items()}, str(path),
              metadata={"features": str(policy.head.in_features), "sigma_floor": repr(policy.sigma_floor),
                        "knobs": moved})


def load_prompt_policy(path) -> PromptSchedulePolicy:
    """What save_prompt_policy wrote, ready for deterministic_knobs(prompt features)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    state = load_file(str(path))
    floor = float(meta["sigma_floor"])
    knobs = meta.get("knobs", ",".join(KNOBS)).split(",")  # files from before train.schedule_knobs move all four
    policy = PromptSchedulePolicy(state["base"], int(meta["features"]), floor + 1.0, floor, knobs)  # σ: the file's
    policy.load_state_dict(state)
    return policy


def prompt_knobs(policy: SchedulePolicy, features: torch.Tensor, target_base: torch.Tensor) -> torch.Tensor:
    """(n, T', 4): the deterministic schedule of each of n prompts (features (n, F)), carried to the step count of
    target_base (T', 4) when it is not the policy's own: its mean actions interpolated over decoding progress, as
    train.share_schedule trained them (interpolating knob values instead would differ where a knob saturates)."""
    if len(target_base) == policy.steps:
        return policy.deterministic_knobs(features)
    return ProgressSchedulePolicy(policy, target_base).deterministic_knobs(features)
