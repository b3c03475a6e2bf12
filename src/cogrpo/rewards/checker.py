"""Rewards of the embedded world, read off its exact GenEval-style checker."""

from __future__ import annotations

from collections import Counter

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


def colour_free(spec: dict) -> bool:
    """The prompt asks for objects and names no colour for any of them."""
    return bool(spec.get("include")) and not any("color" in obj for obj in spec["include"])


def colour_novelty(world: World):
    """For a prompt that names no colour: how rare a sample's object colours are among the other samples of the same
    prompt in the batch (its GRPO group), the mean over its objects of the share of the others' objects in another
    colour; 0 for a prompt that names a colour (constant within the group: no signal). A term beside
    `compositional`: where the reward leaves colour free, GRPO otherwise drifts to one colour
    (reports/side_effects.md)."""
    checker = Checker(world)

    def reward(images, prompts, specs):
        out = torch.zeros(len(images))
        groups: dict[str, list[int]] = {}
        for i, prompt in enumerate(prompts):
            groups.setdefault(prompt, []).append(i)
        for rows in groups.values():
            if not colour_free(specs[rows[0]]):
                continue
            colours = {i: [o.color for o in checker.detect(images[i]).objects] for i in rows}
            for i in rows:
                others = Counter(c for j in rows if j != i for c in colours[j])
                total = sum(others.values())
                if colours[i] and total:
                    out[i] = sum(1 - others[c] / total for c in colours[i]) / len(colours[i])
        return out

    return reward
