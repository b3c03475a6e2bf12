"""bench/modes.py's statistics (issue 14, item 1): grid points, t-intervals, P4 and its bootstrap, the summary."""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("modes", Path(__file__).resolve().parents[1] / "bench" / "modes.py")
modes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(modes)


def test_grid_points_scale_both_learning_rates_and_are_named_by_their_values():
    points = modes.grid_points({"lr_scale": [1, 3], "train.step_fraction": [0.5]}, 1e-4, 0.1)
    assert points == {"lr_scale=1,step_fraction=0.5": {"train.step_fraction": 0.5, "train.lr_model": 1e-4,
                                                         "train.lr_schedule": 0.1},
                      "lr_scale=3,step_fraction=0.5": {"train.step_fraction": 0.5, "train.lr_model": pytest.approx(3e-4),
                                                         "train.lr_schedule": pytest.approx(0.3)}}
    assert modes.grid_points({}, 1e-4, 0.1) == {"": {}}  # one point: params.yaml's, no tuning


def test_interval_is_the_t_interval_of_the_mean():
    mean, low, high = modes.interval([0.5, 0.6, 0.7])
    # t(0.975, 2) = 4.303, sd 0.1, n 3
    assert mean == pytest.approx(0.6) and high - mean == pytest.approx(4.3027 * 0.1 / 3**0.5, rel=1e-3)
    assert modes.interval([0.4]) == (0.4, 0.4, 0.4)


def test_p4_is_the_ratio_of_gains_over_base_with_an_interval_around_it():
    p = modes.p4([0.70, 0.72, 0.68], [0.60, 0.62, 0.58], base=0.5)
    assert p["P4"] == pytest.approx(2.0)
    assert p["low"] < 2.0 < p["high"] and p["low"] > 1.0  # co's gain is clearly twice model's here
    noisy = modes.p4([0.9, 0.5, 0.7], [0.6, 0.58, 0.62], base=0.5)
    assert noisy["high"] - noisy["low"] > p["high"] - p["low"]


def test_a_paired_interval_is_tighter_when_the_seeds_move_both_modes_alike():
    """Seed by seed co is model + 0.05, but the seeds move both by ±0.1: resampled together the difference is
    exactly 0.05; resampled apart, the seeds' spread shows up as uncertainty."""
    model = [0.5, 0.6, 0.7, 0.55, 0.65]
    co = [m + 0.05 for m in model]
    d = modes.difference(co, model, paired=True)
    assert d["paired_low"] == pytest.approx(0.05) and d["paired_high"] == pytest.approx(0.05)
    assert d["low"] < 0 < d["high"]
    p = modes.p4(co, model, base=0.4, paired=True)
    assert p["paired_high"] - p["paired_low"] < p["high"] - p["low"]


def _run(mode, seed, held8, held4=0.3):
    scores = {str(t): held8 if t == 8 else held4 for t in modes.STEPS}
    return {"mode": mode, "seed": seed, "trained": {"heldout": scores, "seen": scores},
            "entropy": {str(t): 1.0 + seed / 10 for t in modes.STEPS}}


def test_summary_and_markdown_give_every_mode_p4_p5_and_the_prompt_policy_difference():
    base = {split: {str(t): 0.5 for t in modes.STEPS} for split in modes.SPLITS}
    report = {"base": base, "base_entropy": {str(t): 1.2 for t in modes.STEPS}, "tuning": [], "best": {}, "set": {},
              "seeds": [_run(m, s, v) for m, vals in (("co", [0.7, 0.72]), ("model", [0.6, 0.62]),
                                                      ("co:prompt", [0.75, 0.77])) for s, v in enumerate(vals)]}
    summary = modes.summarize(report, 8)
    assert summary["modes"]["co"]["heldout"]["8"][0] == pytest.approx(0.71)
    assert summary["P4"]["co"]["8"]["P4"] == pytest.approx(0.21 / 0.11)
    assert summary["P4"]["co:prompt"]["8"]["P4"] == pytest.approx(0.26 / 0.11) and "model" not in summary["P4"]
    assert summary["prompt_vs_per_step"]["difference"] == pytest.approx(0.05)
    assert summary["P5"]["at_4"]["co"][0] == pytest.approx(0.3) and summary["P5"]["base_at_8"] == 0.5
    assert summary["modes"]["model"]["entropy"]["8"][0] == pytest.approx(1.05)
    text = modes.markdown(report, summary, 8)
    assert "paired by seed" in text and "**P4**" in text and "**P5**" in text and "| co:prompt |" in text and "## colour entropy" in text
    trained_at_4 = modes.summarize(report, 4)  # P4 at the trained count and at the 8 steps
    assert trained_at_4["P4"]["co"].keys() == {"4", "8"}


def test_runs_reused_from_a_report_without_entropies_are_summarised_and_named():
    base = {split: {str(t): 0.5 for t in modes.STEPS} for split in modes.SPLITS}
    old = [{k: v for k, v in _run("co", s, v).items() if k != "entropy"} | {"reused_from": "reports/modes.json"}
           for s, v in enumerate([0.7, 0.72])]
    report = {"base": base, "base_entropy": None, "tuning": [], "best": {}, "set": {},
              "seeds": old + [_run("co:prompt", s, v) for s, v in enumerate([0.75, 0.77])]}
    summary = modes.summarize(report, 8)
    assert summary["modes"]["co"]["entropy"] is None and summary["modes"]["co:prompt"]["entropy"]["8"][0] > 0
    text = modes.markdown(report, summary, 8)
    assert "2 of co's 2 seeded runs are `reports/modes.json`'s (--reuse)" in text
    over = {"train.step_fraction": 1.0}
    earlier = [{"mode": "co", "seed": 1, "overrides": over}, {"mode": "co", "seed": 0, "overrides": {}}]
    assert modes.reusable(earlier, "co", 1, {"train.step_fraction": 1.0}) is earlier[0]
    assert modes.reusable(earlier, "co", 0, over) is None and modes.reusable(earlier, "model", 1, over) is None
    assert "| co | — | — | — | — | 2 |" in text and "**Prompt-conditioned vs per-step" in text
