"""Rewards of the embedded world, read off its exact GenEval-style checker."""

from __future__ import annotations

import torch

from cogrpo.world.checker import Checker
from cogrpo.world.scenes import World


def compositional(world: World):
    """Fraction of the spec's facts the strict checker finds satisfied (the default training reward)."""
    checker = Checker(world)

    def reward(images, prompts, specs):
        return torch.tensor([checker.check(img, spec).score for img, spec in zip(images, specs)])

    return reward


def strict(world: World):
    """1 when every fact holds and the image is clean, else 0."""
    checker = Checker(world)

    def reward(images, prompts, specs):
        return torch.tensor([float(checker.check(img, spec).correct) for img, spec in zip(images, specs)])

    return reward
