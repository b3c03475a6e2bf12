"""The schedule policy π_φ: per step, a diagonal Gaussian over the four knob residuals (DESIGN.md §1).

Actions live in pre-activation space and move the hand-crafted base schedule (cogrpo.core.schedule), so the
zero-initialised mean reproduces the base. σ = σ_floor + exp(log_std) keeps exploration from collapsing
while staying smooth in log_std. Knobs the policy does not move (train.schedule_knobs) get action 0, always: they
are left out of the log-prob, so nothing learns them. `PromptSchedulePolicy` also reads the prompt: its mean per
step is moved by a linear read-out of the prompt's pooled text features (train.schedule_policy: prompt).
`StateSchedulePolicy` reads the decoding state before each step as well (train.schedule_policy: state): its mean
is moved by a small network over the state's features (core/state.py) and the prompt's; the sampler asks it step
by step (`StateChoices`).
`ProgressSchedulePolicy` is another policy read at a different step count through decoding progress
(train.share_schedule): one schedule for every step count trained.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from cogrpo.core.schedule import KNOBS, apply_actions, progress_weights
from cogrpo.core.state import STATE_FEATURES

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class SchedulePolicy(nn.Module):
    conditioned = False  # reads no prompt: every method's context is ignored
    stateful = False  # reads no decoding state: every method's features are ignored (StateSchedulePolicy reads them)

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

    def mean_for(self, context: torch.Tensor | None = None, features: torch.Tensor | None = None) -> torch.Tensor:
        """The mean action, (T, 4), or (n, T, 4) for n prompts' features (n, F) and their decoding states' features
        (n, T, F_state) where the policy reads them."""
        return self.mean

    def noise(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """(n, T, 4) standard normal draws: what `act` turns into actions."""
        return torch.randn(n, *self.base.shape, generator=generator)

    def act(self, noise: torch.Tensor, context: torch.Tensor | None = None,
            features: torch.Tensor | None = None) -> torch.Tensor:
        """(n, T, 4) actions from noise (n, T, 4), for the n trajectories' prompt and state features."""
        return ((self.mean_for(context, features) + self.std() * noise) * self.moves).detach()

    def sample(self, n: int, generator: torch.Generator | None = None,
               context: torch.Tensor | None = None) -> torch.Tensor:
        """(n, T, 4) actions."""
        return self.act(self.noise(n, generator), context)

    def log_prob(self, actions: torch.Tensor, context: torch.Tensor | None = None,
                 features: torch.Tensor | None = None) -> torch.Tensor:
        """(n, T) log-density of each step's 4-dim action."""
        std = self.std()
        z = (actions - self.mean_for(context, features)) / std
        return ((-0.5 * z**2 - std.log() - LOG_SQRT_2PI) * self.moves).sum(-1)

    def knobs(self, actions: torch.Tensor) -> torch.Tensor:
        """Knob values (…, T, 4) the sampler takes, for actions (…, T, 4)."""
        return apply_actions(self.base, actions)

    def deterministic_knobs(self, context: torch.Tensor | None = None,
                            features: torch.Tensor | None = None) -> torch.Tensor:
        """The evaluation schedule: actions at the mean; (n, T, 4), one per prompt, for a conditioned policy given
        the prompts' features, else (T, 4) (a conditioned policy without features: its per-step part). A state
        policy decodes step by step instead (`StateChoices`, at zero noise)."""
        return apply_actions(self.base, (self.mean_for(context, features) * self.moves).detach())


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

    def mean_for(self, context: torch.Tensor | None = None, features: torch.Tensor | None = None) -> torch.Tensor:
        if context is None:
            return self.mean
        return self.mean + self.head(_normalised(context)).view(-1, *self.base.shape)


def _normalised(context: torch.Tensor) -> torch.Tensor:
    """Prompt features layer-normalised without affine: unit-scale inputs whatever the text encoder."""
    return F.layer_norm(context.float(), context.shape[-1:])


class StateSchedulePolicy(SchedulePolicy):
    """π_φ(a_t | decoding state at t, prompt), the paper's p_φ(A_{t+1} | V^(t), c): the per-step mean plus a small
    network's residual over the state's features (n, T, F_state: progress, masked fraction, the previous step's
    confidence and entropy quantiles; core/state.py) and the prompt's pooled features (layer-normalised); its last
    layer zero-initialised, so training starts exactly at the per-step policy. One network for every step (the
    progress is an input), so a shared schedule carries it to any step count. σ stays per step. Exact log-probs:
    a Gaussian whose mean is a function of the recorded features."""

    conditioned = True
    stateful = True

    def __init__(self, base_knobs: torch.Tensor, features: int, sigma_init: float = 0.3, sigma_floor: float = 0.05,
                 knobs: tuple[str, ...] | list[str] = KNOBS, hidden: int = 32, state_features: int = STATE_FEATURES):
        super().__init__(base_knobs, sigma_init, sigma_floor, knobs)
        self.state_features = state_features
        self.net = nn.Sequential(nn.Linear(state_features + features, hidden), nn.Tanh(), nn.Linear(hidden, len(KNOBS)))
        first, last = self.net[0], self.net[-1]
        with torch.no_grad():  # each input block a unit-scale share of a hidden unit's input: the few state features
            g = torch.Generator().manual_seed(0)  # would be drowned by the hundreds of prompt features otherwise
            first.weight[:, :state_features] = torch.randn(hidden, state_features, generator=g) / state_features**0.5
            first.weight[:, state_features:] = torch.randn(hidden, features, generator=g) / features**0.5
            first.bias.zero_()
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def state_residual(self, context: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """(n, S, 4): the network's move of the mean at S steps' state features (n, S, F_state)."""
        prompt = _normalised(context)[:, None].expand(-1, features.shape[1], -1)
        return self.net(torch.cat([features.float(), prompt], -1))

    def mean_for(self, context: torch.Tensor | None = None, features: torch.Tensor | None = None) -> torch.Tensor:
        if features is None:  # its per-step part (schedule.json)
            return self.mean
        return self.mean + self.state_residual(context, features)


class StateChoices:
    """The sampler's per-step schedule under a state policy (`sample(..., choose=StateChoices(...))`): step t's
    action from step t's noise (n, T, 4 drawn up front: zeros decode at the mean, the evaluation schedule), the
    prompts' features and the state's features then; it records both, so that
    policy.log_prob(actions, context, features) recomputes the rollout's log-probs."""

    def __init__(self, policy: SchedulePolicy, noise: torch.Tensor, context: torch.Tensor):
        self.policy, self.noise, self.context = policy, noise, context
        self.actions = torch.zeros_like(noise)
        self.features = torch.zeros(*noise.shape[:2], policy.state_features)

    def __call__(self, t: int, features: torch.Tensor) -> torch.Tensor:
        """Step t's knob values (n, 4) for the state's features (n, F_state)."""
        self.features[:, t] = features
        with torch.no_grad():  # one step's mean: the network at this step's features, broadcast over the steps
            self.actions[:, t] = self.policy.act(self.noise, self.context, features[:, None])[:, t]
            return apply_actions(self.policy.base[t], self.actions[:, t])


class ProgressSchedulePolicy(SchedulePolicy):
    """A policy over T' steps that owns no parameters: the mean and σ of `source` (over its T steps), linearly
    interpolated over decoding progress (the weights `transfer` carries a learned schedule with), acting on its own
    base schedule. Exact log-probs (a Gaussian whose mean and σ are linear in the source's); its gradients reach
    the source, so training at T' trains the one schedule every step count shares."""

    def __init__(self, source: SchedulePolicy, base_knobs: torch.Tensor):
        nn.Module.__init__(self)  # not SchedulePolicy's: no mean or log_std of its own (std and mean_for read source)
        self.sources = [source]  # a plain list: the source's parameters are not this module's (nor saved twice)
        self.sigma_floor = source.sigma_floor
        self.conditioned, self.stateful = source.conditioned, source.stateful
        if source.stateful:
            self.state_features = source.state_features
        self.register_buffer("base", base_knobs.clone())
        self.register_buffer("moves", source.moves.clone(), persistent=False)
        self.register_buffer("weights", progress_weights(source.steps, len(base_knobs)), persistent=False)

    def std(self) -> torch.Tensor:
        return self.weights @ self.sources[0].std()

    def mean_for(self, context: torch.Tensor | None = None, features: torch.Tensor | None = None) -> torch.Tensor:
        """The source's per-step part carried here; a state source's network read at this count's own state
        features (whose progress is this count's)."""
        source = self.sources[0]
        carried = self.weights @ source.mean_for(context)
        return carried if features is None else carried + source.state_residual(context, features)


POLICY_KINDS = {"prompt": PromptSchedulePolicy, "state": StateSchedulePolicy}  # the exported conditioned policies


def save_conditioned_policy(policy: PromptSchedulePolicy | StateSchedulePolicy, path) -> None:
    """The whole policy (base, per-step mean and std, its read-out or network) as safetensors; its kind and shape in
    the metadata."""
    from safetensors.torch import save_file

    kind = "state" if policy.stateful else "prompt"
    if policy.stateful:
        first = policy.net[0]
        shape = {"features": first.in_features - policy.state_features, "hidden": first.out_features,
                 "state_features": policy.state_features}
    else:
        shape = {"features": policy.head.in_features}
    moved = ",".join(k for k, m in zip(KNOBS, policy.moves) if m)
    save_file({k: v.contiguous() for k, v in policy.state_dict().items()}, str(path),
              metadata={"kind": kind, "sigma_floor": repr(policy.sigma_floor), "knobs": moved}
              | {k: str(v) for k, v in shape.items()})


def load_conditioned_policy(path) -> PromptSchedulePolicy | StateSchedulePolicy:
    """What save_conditioned_policy wrote, ready to decode at its mean (`decoding_schedule`)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    state = load_file(str(path))
    floor = float(meta["sigma_floor"])
    knobs = meta.get("knobs", ",".join(KNOBS)).split(",")  # files from before train.schedule_knobs move all four
    kind = meta.get("kind", "prompt")  # files from before the state policy hold a prompt policy
    shape = {"hidden": int(meta["hidden"]), "state_features": int(meta["state_features"])} if kind == "state" else {}
    policy = POLICY_KINDS[kind](state["base"], int(meta["features"]), floor + 1.0, floor, knobs,  # σ: the file's
                                **shape)
    policy.load_state_dict(state)
    return policy


def at_steps(policy: SchedulePolicy, target_base: torch.Tensor) -> SchedulePolicy:
    """The policy at the step count of target_base (T', 4): itself, or carried there over decoding progress as
    train.share_schedule trains it (`ProgressSchedulePolicy`: its mean actions interpolated, not its knob values,
    which differ where a knob saturates)."""
    return policy if len(target_base) == policy.steps else ProgressSchedulePolicy(policy, target_base)


def decoding_schedule(policy: SchedulePolicy, context: torch.Tensor,
                      target_base: torch.Tensor) -> tuple[torch.Tensor, StateChoices | None]:
    """How n trajectories of prompts with features context (n, F) decode under a conditioned policy at the step
    count of target_base (T', 4), deterministically (at the mean), as `sample`'s (knobs, choose): a prompt policy's
    (n, T', 4) schedules; a state policy's choices step by step (knobs: target_base, the step count)."""
    policy = at_steps(policy, target_base)
    if policy.stateful:
        return target_base, StateChoices(policy, torch.zeros(len(context), *target_base.shape), context)
    return policy.deterministic_knobs(context), None
