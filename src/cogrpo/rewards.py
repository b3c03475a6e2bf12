"""The reward registry: each reward is a factory returning a callable (images, prompts, specs) → (n,) tensor.

Built-in: "compositional" (fraction of the spec's facts the strict checker finds satisfied, the default)
and "strict" (1 when every fact holds and the image is clean, else 0). Real reward models (ImageReward,
HPSv2, CLIP score) register here too, under their own names, through the same factory signature.
`combine` makes a weighted sum, each term optionally z-normalised over the batch first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from cogrpo.checker import Checker
from cogrpo.errors import InputError
from cogrpo.scenes import World

RewardFn = Callable[[np.ndarray, Sequence[str], Sequence[dict]], torch.Tensor]
REGISTRY: dict[str, Callable[[World], RewardFn]] = {}


def register(name: str):
    def deco(factory: Callable[[World], RewardFn]) -> Callable[[World], RewardFn]:
        REGISTRY[name] = factory
        return factory

    return deco


@register("compositional")
def compositional(world: World) -> RewardFn:
    checker = Checker(world)

    def reward(images, prompts, specs):
        return torch.tensor([checker.check(img, spec).score for img, spec in zip(images, specs)])

    return reward


@register("strict")
def strict(world: World) -> RewardFn:
    checker = Checker(world)

    def reward(images, prompts, specs):
        return torch.tensor([float(checker.check(img, spec).correct) for img, spec in zip(images, specs)])

    return reward


def build(name: str, world: World) -> RewardFn:
    if name not in REGISTRY:
        raise InputError(f"unknown reward {name!r} (known: {', '.join(sorted(REGISTRY))})")
    return REGISTRY[name](world)


def combine(terms: Sequence[tuple[str, float, bool]], world: World) -> Callable[..., dict[str, torch.Tensor]]:
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
