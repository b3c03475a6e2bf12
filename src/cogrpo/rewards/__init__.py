"""The reward registry: a name → the factory that builds it, `factory(world) → reward(images, prompts, specs)`,
where the reward returns one float per image as an (n,) tensor.

The registry names factories by import path and imports them only when built, so the params schema can check
reward names without importing what the rewards need (the checker, and later the reward-model clients).
`combine` makes the weighted sum the trainer optimises, each term optionally z-normalised over the batch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import numpy as np
import torch

from cogrpo.errors import InputError

RewardFn = Callable[[np.ndarray, Sequence[str], Sequence[dict]], torch.Tensor]
REGISTRY: dict[str, str] = {
    "compositional": "cogrpo.rewards.checker:compositional",
    "strict": "cogrpo.rewards.checker:strict",
    "colour_match": "cogrpo.rewards.pixels:colour_match",
}


def build(name: str, world) -> RewardFn:
    if name not in REGISTRY:
        raise InputError(f"unknown reward {name!r} (known: {', '.join(sorted(REGISTRY))})")
    module, attr = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), attr)(world)


def combine(terms: Sequence[tuple[str, float, bool]], world) -> Callable[..., dict[str, torch.Tensor]]:
    """Weighted sum of (name, weight, normalise) terms; returns {"total": (n,), name: (n,) raw, ...}."""
    fns = [(name, weight, norm, build(name, world)) for name, weight, norm in terms]

    def reward(images, prompts, specs) -> dict[str, torch.Tensor]:
        out, total = {}, torch.zeros(len(images))
        for name, weight, norm, fn in fns:
            r = fn(images, prompts, specs).float()
            out[name] = r
            if norm:
                r = (r - r.mean()) / (r.std(unbiased=False) + 1e-6)
            total = total + weight * r
        out["total"] = total
        return out

    return reward
