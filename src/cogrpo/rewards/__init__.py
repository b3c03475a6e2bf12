"""The reward registry: a name → the factory that builds it, `factory(world) → reward(images, prompts, specs)`,
where the reward returns one float per image as an (n,) tensor.

The registry names factories by import path and imports them only when built, so the params schema can check
reward names without importing what the rewards need. The SERVED rewards are reward models scored by the reward
server (reward_server/, in its own environment) through cogrpo.rewards.remote; their factory also takes the
server's URL and the term's label (hpsv2's carries its version). `combine` scores every term and makes their weighted
sum, each term optionally z-normalised over the batch (`term_values`); an optional term scores 0 where it fails.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch

from cogrpo.errors import InputError, RewardServerError

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
    required: bool = True  # False: a failure scores 0 (combine)

    @classmethod
    def of(cls, term) -> "Term":
        """From a params entry (cogrpo.config.RewardTerm)."""
        return cls(term.name, term.weight, term.normalize, term.version, term.required)

    @property
    def label(self) -> str:
        """Its key in the scores and the metrics: the name, with the version where there is one."""
        return f"{self.name}_{self.version}" if self.version else self.name


def train_terms(train) -> list[Term]:
    """The reward terms a training optimises (cogrpo.config.TrainConfig.rewards), in their order: what its reward
    server serves, what it scores and logs per term."""
    return [Term.of(t) for t in train.rewards]


def eval_terms(train) -> list[Term]:
    """The reward terms a training watches and never optimises (TrainConfig.eval_rewards), in their order."""
    return [Term.of(t) for t in train.eval_rewards]


def served_terms(train) -> list[Term]:
    """Every term a training scores, trained or watched, each label once: what its reward server serves."""
    return list({t.label: t for t in eval_terms(train) + train_terms(train)}.values())


def build(term: Term, world, server_url: str | None = None, timeout_s: float = 600.0) -> RewardFn:
    if term.name not in REGISTRY:
        raise InputError(f"unknown reward {term.name!r} (known: {', '.join(sorted(REGISTRY))})")
    module, attr = REGISTRY[term.name].split(":")
    factory = getattr(importlib.import_module(module), attr)
    if term.name in SERVED:
        return factory(term.label, server_url, timeout_s)
    return factory(world)


def term_values(terms: Sequence[Term], scores: dict[str, torch.Tensor]) -> torch.Tensor:
    """(n, K): each term's scores as they enter the weighted sum, z-normalised over the batch where it says."""
    columns = [scores[t.label] for t in terms]
    return torch.stack([(r - r.mean()) / (r.std(unbiased=False) + 1e-6) if t.normalize else r
                        for t, r in zip(terms, columns)], -1)


def term_weights(terms: Sequence[Term]) -> torch.Tensor:
    """(K,): the terms' weights, in their order."""
    return torch.tensor([t.weight for t in terms])


def _scored(term: Term, fn: RewardFn, images, prompts, specs,
            on_failure: Callable[[str, str], None]) -> tuple[torch.Tensor, torch.Tensor]:
    """The term's scores (n,) and 1.0 where it failed (n,). A required term's failure stops the run here: a
    skipped update would export the base model as "trained", and cache it."""
    try:
        r = fn(images, prompts, specs).float()
    except RewardServerError as err:
        if term.required:
            raise
        on_failure(term.label, str(err))
        return torch.zeros(len(images)), torch.ones(len(images))
    bad = ~torch.isfinite(r)
    if bad.any():
        reason = f"reward term '{term.label}' scored {int(bad.sum())} of {len(r)} images NaN or infinite"
        if term.required:
            raise InputError(reason)
        on_failure(term.label, reason)
    return torch.where(bad, 0.0, r), bad.float()


def combine(terms: Sequence[Term], world, server_url: str | None = None, timeout_s: float = 600.0,
            on_failure: Callable[[str, str], None] = lambda label, reason: None
            ) -> Callable[..., dict[str, torch.Tensor]]:
    """Weighted sum of the terms; returns {"total": (n,), <term label>: (n,) raw, ...}. A required term that scores
    any image NaN or infinite is an InputError naming it, a reward server failing it a RewardServerError. An
    optional term (required False) scores 0 where it fails instead, calls on_failure(label, reason), and has
    "failed/<label>": (n,) 1.0 where it failed, 0.0 elsewhere."""
    fns = [(term, build(term, world, server_url, timeout_s)) for term in terms]

    def reward(images, prompts, specs) -> dict[str, torch.Tensor]:
        out = {}
        for term, fn in fns:
            out[term.label], failed = _scored(term, fn, images, prompts, specs, on_failure)
            if not term.required:
                out[f"failed/{term.label}"] = failed
        out["total"] = term_values(terms, out) @ term_weights(terms)
        return out

    return reward
