"""The inference schedule: four knobs per decoding step (DESIGN.md §1).

Knob values, per step t = 1..T, in this order:
  ratio               fraction of the N tokens still masked after step t
  temperature         τ_s, divides the guided logits before sampling
  remask_temperature  τ_r, scales the Gumbel noise on the confidences that choose committed tokens
  cfg                 w in l_u + w (l_c − l_u)
The base schedule is hand-crafted; a schedule action a_t ∈ R⁴ is a residual in pre-activation space
(logit for the ratio, inverse softplus for the rest), so a zero action reproduces the base.
A schedule is exported as plain JSON of per-step values, which the sampler takes directly.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import get_args

import torch
import torch.nn.functional as F

from cogrpo.config import Knob, ScheduleConfig
from cogrpo.errors import InputError

KNOBS: tuple[str, ...] = get_args(Knob)  # the last axis of every (…, T, 4) knob tensor
POSITION: dict[str, int] = {name: i for i, name in enumerate(KNOBS)}  # a knob's place on that axis, by name
RATIO, TEMPERATURE, REMASK_TEMPERATURE, CFG = (POSITION[k] for k in ("ratio", "temperature", "remask_temperature",
                                                                      "cfg"))
assert RATIO == 0, "to_preactivation maps the first knob by a logit, the rest by an inverse softplus"
_EPS = 1e-4


def base_ratios(curve: str, steps: int) -> torch.Tensor:
    if curve == "amused":  # AmusedScheduler's cosine in its float32 arithmetic: cos(π/3)·N floors one token lower
        return torch.cos((torch.arange(steps) + 1) / steps * math.pi / 2).clamp(0, 1)
    t = torch.arange(1, steps + 1, dtype=torch.float64) / steps
    if curve == "cosine":
        r = torch.cos(math.pi / 2 * t)
    elif curve == "linear":
        r = 1 - t
    elif curve == "convex":
        r = (1 - t) ** 2
    else:
        raise ValueError(f"unknown ratio curve {curve!r}")
    return r.clamp(0, 1).float()


def base_knobs(cfg: ScheduleConfig) -> torch.Tensor:
    """(T, 4) knob values of the hand-crafted schedule: τ_r decays linearly from its start, to start/T at the last
    step (`per_step`) or to 0 there, as AmusedScheduler's linspace does (`to_zero`)."""
    T = cfg.steps
    if cfg.remask_anneal == "to_zero":
        remask = torch.linspace(cfg.remask_temperature, 0, T)
    else:
        remask = cfg.remask_temperature * (1 - torch.arange(T, dtype=torch.float32) / T)
    values = {"ratio": base_ratios(cfg.ratio_curve, T), "temperature": torch.full((T,), cfg.temperature),
              "remask_temperature": remask, "cfg": torch.full((T,), cfg.cfg)}
    return torch.stack([values[k] for k in KNOBS], -1)


def _inv_softplus(y: torch.Tensor) -> torch.Tensor:
    return y + torch.log(-torch.expm1(-y))


def to_preactivation(knobs: torch.Tensor) -> torch.Tensor:
    """Knob values → pre-activation space (the ratio is clamped away from 0 and 1 first)."""
    ratio = knobs[..., RATIO].clamp(_EPS, 1 - _EPS)  # the first knob (config.Knob); the rest are positive scales
    return torch.cat([torch.logit(ratio)[..., None], _inv_softplus(knobs[..., RATIO + 1:].clamp(min=_EPS))], -1)


def from_preactivation(z: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.sigmoid(z[..., :RATIO + 1]), F.softplus(z[..., RATIO + 1:])], -1)


def apply_actions(base: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Knob values of base (T, 4) moved by residual actions (..., T, 4) in pre-activation space."""
    return from_preactivation(to_preactivation(base) + actions)


def transfer(knobs: torch.Tensor, base: torch.Tensor, new_base: torch.Tensor) -> torch.Tensor:
    """Carry a schedule (…, T, 4) learned on T steps to another step count: its residuals on `base` (T, 4),
    linearly interpolated over decoding progress, applied to `new_base` (T', 4)."""
    residual = to_preactivation(knobs) - to_preactivation(base)
    return apply_actions(new_base, progress_weights(len(base), len(new_base)) @ residual)


def progress_weights(T: int, T_new: int) -> torch.Tensor:
    """(T_new, T): row i linearly interpolates T per-step values at the decoding progress of step i of T_new (step
    centres matched); the identity when T_new == T. `transfer` and `ProgressSchedulePolicy` both carry per-step
    values to other step counts with it."""
    src = (torch.arange(T_new, dtype=torch.float32) + 0.5) * T / T_new - 0.5
    lo = src.floor().clamp(0, T - 1).long()
    hi = (lo + 1).clamp(max=T - 1)
    w = (src - lo).clamp(0, 1)
    out = torch.zeros(T_new, T)
    out[torch.arange(T_new), lo] += 1 - w
    out[torch.arange(T_new), hi] += w
    return out


def resolve_schedule(cfg: ScheduleConfig, schedule_file: str | Path | None = None,
                     steps: int | None = None) -> torch.Tensor:
    """The (T, 4) knobs to decode with at `steps` (default cfg.steps): the schedule file's, carried over from its
    own step count when that differs (see `transfer`), or without a file the base schedule of cfg."""
    target = base_knobs(cfg.model_copy(update={"steps": steps or cfg.steps}))
    if schedule_file is None:
        return target
    learned = load_schedule(schedule_file)
    if len(learned) == len(target):
        return learned
    return transfer(learned, base_knobs(cfg.model_copy(update={"steps": len(learned)})), target)


def masked_counts(ratios: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """(n, T) masked-token counts after each step from ratios (n, T): floor(N·r_t), forced to strictly
    decrease (every step commits at least one token), to leave one token per remaining step, and to 0 at T."""
    n, T = ratios.shape
    counts = torch.empty(n, T, dtype=torch.long)
    prev = torch.full((n,), n_tokens, dtype=torch.long)
    for t in range(T):
        prev = counts[:, t] = next_masked_count(ratios[:, t], prev, t, T, n_tokens)
    return counts


def next_masked_count(ratio: torch.Tensor, before: torch.Tensor, t: int, steps: int, n_tokens: int) -> torch.Tensor:
    """(n,) masked-token counts after step t of `steps` from its ratios (n,) and the counts before it (n,), by the
    rules of `masked_counts`: one step at a time, for a sampler whose ratio of step t is chosen just before it."""
    if steps > n_tokens:
        raise ValueError(f"{steps} steps cannot each commit a token of {n_tokens}")
    m = torch.floor(n_tokens * ratio.double() + 1e-9).long() if t < steps - 1 else torch.zeros_like(before)
    return torch.minimum(m, before - 1).clamp(min=steps - 1 - t)


def save_schedule(knobs: torch.Tensor, path: str | Path) -> None:
    """Write (T, 4) knob values as JSON: {"steps": T, "knobs": [...], "schedule": [{knob: value}, ...]}."""
    rows = [{k: round(float(v), 6) for k, v in zip(KNOBS, step)} for step in knobs]
    Path(path).write_text(json.dumps({"steps": len(rows), "knobs": list(KNOBS), "schedule": rows}, indent=1))


def load_schedule(path: str | Path) -> torch.Tensor:
    path = Path(path)
    try:
        rows = json.loads(path.read_text())["schedule"]
        knobs = torch.tensor([[float(r[k]) for k in KNOBS] for r in rows])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(f"{path}: not a schedule file ({type(err).__name__}: {err})") from None
    bad = (knobs[:, RATIO + 1:] <= 0).any() or (knobs[:, RATIO] < 0).any() or (knobs[:, RATIO] > 1).any()
    if len(knobs) == 0 or bad:
        raise InputError(f"{path}: knob values out of range (ratio in [0,1], others > 0)")
    return knobs
