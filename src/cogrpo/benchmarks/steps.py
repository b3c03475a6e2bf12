"""Fewer steps, as the paper counts it: the step count at which a variant reaches the base model's score at T steps,
read off the variant's score-against-steps curve, and the steps saved, T ÷ that count (pure functions).
"""

from __future__ import annotations

from collections.abc import Mapping


def steps_to_reach(curve: Mapping[int, float], target: float) -> float | None:
    """The fewest steps at which the curve {steps: score} reaches target (score ≥ target), the curve being
    piecewise linear between its grid points (in step order).

    The first crossing counts: a curve that reaches the target, drops below it and climbs back is timed at its first
    arrival. A grid point that hits the target exactly gives that count. A curve already at the target at its smallest
    count gives that count (nothing is extrapolated below the grid: the true count may be lower). None: not reached
    within the grid.
    """
    points = sorted(curve.items())
    if points[0][1] >= target:
        return float(points[0][0])
    for (s0, a0), (s1, a1) in zip(points, points[1:]):
        if a1 >= target:  # a0 < target here, so a1 > a0
            return s0 + (target - a0) / (a1 - a0) * (s1 - s0)
    return None


def steps_saved(base_steps: float, steps_needed: float | None) -> float | None:
    """base_steps ÷ steps_needed: how many times fewer steps reach the base's score (None when never reached)."""
    return None if steps_needed is None else base_steps / steps_needed
