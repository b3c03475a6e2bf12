"""Choosing the checkpoint a training run exports, from validations on seen-distribution prompts.

A validation is the GenEval-style summary of one checkpoint on a fixed subset of the training prompts (never the
held-out ones) at a fixed seed: {"overall": x, <tag>: x, ..., "dpg": x}. Every checkpoint is scored on the same
prompts and noise as the base (iteration 0), so the comparison with the base is paired. The rule guards what a
mean hides: a checkpoint is eligible only if no tag (and not the DPG-style score) fell more than `tolerance`
below the base's; the eligible one with the best overall is exported. The base is always eligible, so a run whose
every checkpoint lost a tag exports the base, and says so.
"""

from __future__ import annotations

import torch


def validation_rows(tags: list[str], per_tag: int, seed: int) -> list[int]:
    """Up to per_tag rows of every tag, drawn without replacement by a seeded permutation, in row order."""
    order = torch.randperm(len(tags), generator=torch.Generator().manual_seed(seed)).tolist()
    taken: dict[str, int] = {}
    rows = []
    for r in order:
        if taken.get(tags[r], 0) < per_tag:
            taken[tags[r]] = taken.get(tags[r], 0) + 1
            rows.append(r)
    return sorted(rows)


def regressions(validation: dict[str, float], base: dict[str, float], tolerance: float) -> dict[str, float]:
    """The scores (tags and 'dpg', not 'overall') more than tolerance below the base's: {key: change}."""
    return {k: validation[k] - b for k, b in base.items()
            if k != "overall" and validation[k] < b - tolerance}


def select_checkpoint(validations: dict[int, dict[str, float]], tolerance: float) -> int:
    """The iteration to export: among the validated ones (0, the base, must be among them) with no regression
    beyond tolerance, the best overall; ties go to the earlier iteration (less drift from the base)."""
    base = validations[0]
    eligible = [i for i, v in validations.items() if not regressions(v, base, tolerance)]
    return max(sorted(eligible), key=lambda i: validations[i]["overall"])
