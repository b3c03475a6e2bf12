"""Programmatic image rewards that need no model: cheap, exact, and indifferent to the backbone's resolution.
They prove that learning reaches a real backbone's weights (tiny aMUSEd on CPU), not that images got better."""

from __future__ import annotations

import re

import numpy as np
import torch

from cogrpo.world.palette import PALETTE

SIGMA = 64.0  # RGB distance at which a pixel counts e^-½ ≈ 0.61 as "near" its target


def colour_match(world=None):
    """Mean over pixels of exp(−‖pixel − target‖² / 2σ²), in [0, 1]: how much of the image is near the colour the
    prompt names first (from the palette: red, green, blue …; red when it names none)."""
    names = "|".join(PALETTE)

    def target(prompt: str) -> np.ndarray:
        found = re.search(rf"\b({names})\b", prompt.lower())
        return np.array(PALETTE[found.group(1) if found else "red"], np.float32)

    def reward(images, prompts, specs):
        px = np.asarray(images, np.float32)
        out = [np.exp(-((img - target(p)) ** 2).sum(-1) / (2 * SIGMA**2)).mean() for img, p in zip(px, prompts)]
        return torch.tensor(out, dtype=torch.float32)

    return reward
