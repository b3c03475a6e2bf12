"""Fewer steps, as the paper counts it: the steps at which a score-against-steps curve reaches a target, and the
steps saved (cogrpo.benchmarks.steps)."""

import pytest

from cogrpo.benchmarks.steps import steps_saved, steps_to_reach

CURVE = {2: 0.1, 4: 0.3, 8: 0.5, 16: 0.7}


def test_a_grid_point_that_hits_the_target_is_its_count():
    assert steps_to_reach(CURVE, 0.5) == 8.0
    assert steps_to_reach(CURVE, 0.7) == 16.0
    assert steps_to_reach({8: 0.48784722222222227}, 0.48784722222222227) == 8.0  # the base against itself


def test_between_grid_points_the_count_is_interpolated_linearly():
    assert steps_to_reach(CURVE, 0.4) == pytest.approx(6.0)
    assert steps_to_reach(CURVE, 0.6) == pytest.approx(12.0)
    assert steps_to_reach({16: 0.7, 2: 0.1, 8: 0.5, 4: 0.3}, 0.4) == pytest.approx(6.0)  # in step order, any order


def test_a_target_never_reached_within_the_grid_is_none():
    assert steps_to_reach(CURVE, 0.71) is None
    assert steps_saved(8, None) is None


def test_a_curve_at_the_target_already_at_its_smallest_count_gives_that_count():
    assert steps_to_reach(CURVE, 0.05) == 2.0


def test_a_non_monotone_curve_is_timed_at_its_first_crossing():
    dips = {2: 0.2, 4: 0.6, 8: 0.3, 16: 0.9}
    assert steps_to_reach(dips, 0.4) == pytest.approx(3.0)  # not the 8 → 16 crossing after the dip
    assert steps_to_reach(dips, 0.8) == pytest.approx(8 + 0.5 / 0.6 * 8)  # above the bump: the late one


def test_steps_saved_is_the_base_steps_over_the_steps_needed():
    assert steps_saved(8, 4.0) == 2.0
    assert steps_saved(16, 6.0) == pytest.approx(16 / 6)
    assert steps_saved(8, 8.0) == 1.0
