"""The reward registry: a name → the factory that builds it, `factory(world) → reward(images, prompts, specs)`,
where the reward returns one float per image as an (n,) tensor.

The registry names factories by import path and imports them only when built, so the params schema can check
reward names without importing what the rewards need. The SERVED rewards are reward models scored by the reward
server (reward_server/, in its own environment) through cogrpo.rewards.remote; their factory also takes the
server's URL and the term's label (hpsv2's carries its version). `combine` makes the weighted sum the trainer optimises, each term
optionally z-normalised over the batch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch

from cogrpo.errors import InputError

RewardFn = Callable[[np.ndarray, Sequence[str], Sequence[dict]], torch.Tensor]
REGISTRY: dict[str, str] = {
    "compositional": "cogrpo.rewards.checker:compositional",
    "strict": "cogrpo.rewards.checker:strict",
    "colour_novelty": "cogrpo.rewards.checker:colour_novelty",
    "colour_match": "cogrpo.rewards.pixels:colour_match",
    "imagereward": "cogrpo.rewards.remote:served_reward",
    "hpsv2": "cogrpo.rewards.remote:served_reward",
    "clip": "cogrpo.rewards.remote:served_reward",
}
SERVED = frozenset({"imagereward", "hpsv2", "clip"})


class Term(NamedTuple):
    name: str
    weight: float = 1.0
    normalize: bool = False
    version: str | None = None  # hpsv2's v2.0 or v2.1

    @classmethod
    def of(cls, term) -> "Term":
        """From a params entry (cogrpo.config.RewardTerm)."""
        return cls(term.name, term.weight, term.normalize, term.version)

    @property
    def label(self) -> str:
        """Its key in the scores and the metrics: the name, with the version where there is one."""
        return f"{self.name}_{self.version}" if self.version else self.name


def train_terms(train) -> list[Term]:
    """The reward terms a training optimises (cogrpo.config.TrainConfig.rewards), in their order: what its reward
    server serves, what it scores and logs per term."""
    return [Term.of(t) for t in train.rewards]


def build(term: Term, world, server_url: str | None = None, timeout_s: float = 600.0) -> RewardFn:
    if term.name not in REGISTRY:
        raise InputError(f"unknown reward {term.name!r} (known: {', '.join(sorted(REGISTRY))})")
    module, attr = REGISTRY[term.name].split(":")
    factory = getattr(importlib.import_module(module), attr)
    if term.name in SERVED:
        return factory(term.label, server_url, timeout_s)
    return factory(world)


def combine(terms: Sequence[Term], world, server_url: str | None = None,
            timeout_s: float = 600.0) -> Callable[..., dict[str, torch.Tensor]]:
    """Weighted sum of the terms; returns {"total": (n,), <term label>: (n,) raw, ...}. A term scoring any image
    NaN or infinite is an InputError naming it."""
    fns = [(term, build(term, world, server_url, timeout_s)) for term in terms]

    def reward(images, prompts, specs) -> dict[str, torch.Tensor]:
        out, total = {}, torch.zeros(len(images))
        for term, fn in fns:
            r = fn(images, prompts, specs).float()
            bad = int((~torch.isfinite(r)).sum())
            if bad:  # stop here: a skipped update would export the base model as "trained", and cache it
                raise InputError(f"reward term '{term.label}' scored {bad} of {len(r)} images NaN or infinite")
            out[term.label] = r
            if term.normalize:
                r = (r - r.mean()) / (r.std(unbiased=False) + 1e-6)
            total = total + term.weight * r
        out["total"] = total
        return out

    return reward
