"""Reward-hacking guards (cogrpo.guards, train.guards, train.eval_rewards): the statistics on hand-made images, the
alarm rule on hand-made histories, then the train stage that logs them to MLflow and metrics/guards.csv."""

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from cogrpo.config import GuardsConfig, TrainConfig
from cogrpo.guards import STATISTICS, alarm, diversity, statistics
from tests.tiny import TINY, run_stage


def _flat(rgb, n=4, size=8):
    return np.broadcast_to(np.array(rgb, np.uint8), (n, size, size, 3)).copy()


def test_a_black_batch_is_all_dark_with_zero_brightness_saturation_and_edges():
    s = statistics(_flat((0, 0, 0)), group=2)
    assert set(s) == set(STATISTICS)
    assert s["dark_fraction"] == 1.0 and s["brightness"] == 0.0 and s["saturation"] == 0.0
    assert s["edge_density"] == 0.0 and s["colour_entropy"] == 0.0 and s["diversity"] == 0.0


def test_one_flat_colour_has_no_entropy_nor_edges_and_its_own_saturation_and_brightness():
    s = statistics(_flat((255, 0, 0)), group=4)
    assert s["colour_entropy"] == 0.0 and s["edge_density"] == 0.0 and s["diversity"] == 0.0
    assert s["saturation"] == 1.0 and s["brightness"] == pytest.approx(0.299)
    assert s["dark_fraction"] == 0.0  # luma 0.299 is above the threshold 0.2
    assert statistics(_flat((255, 255, 255)), 2) | {} == pytest.approx(
        {"saturation": 0.0, "brightness": 1.0, "dark_fraction": 0.0, "edge_density": 0.0, "colour_entropy": 0.0,
         "diversity": 0.0})


def test_entropy_edges_and_diversity_see_what_they_should():
    halves = _flat((0, 0, 0), n=2)
    halves[:, :, 4:] = 255  # left half black, right half white: two colours, one vertical edge
    s = statistics(halves, group=2)
    assert s["colour_entropy"] == pytest.approx(1.0)  # two equally common colours: one bit
    assert s["edge_density"] == pytest.approx(1 / 7)  # one column of the 7 × 7 gradient grid
    assert s["dark_fraction"] == 0.5 and s["brightness"] == pytest.approx(0.5)
    assert s["diversity"] == 0.0  # identical images
    pair = np.concatenate([_flat((0, 0, 0), 1), _flat((255, 255, 255), 1)])
    assert diversity(pair, 2) == 1.0
    # groups are consecutive: two groups of identical images are not diverse, whatever the groups differ by
    assert diversity(np.concatenate([_flat((0, 0, 0), 2), _flat((255, 255, 255), 2)]), 2) == 0.0
    with pytest.raises(ValueError, match="groups of 3"):
        diversity(_flat((0, 0, 0), 4), 3)
    assert statistics(_flat((0, 0, 0), 3), group=1)["diversity"] is None  # one image per prompt: no pairs


def _rows(rewards, darks, evals=None):
    return [{"iteration": 10 * i, "reward": r, "dark_fraction": d} | (
        {"eval_reward/clip": evals[i]} if evals else {}) for i, (r, d) in enumerate(zip(rewards, darks))]


BANDS = GuardsConfig().bands()


def test_the_alarm_fires_when_the_reward_rises_and_a_guard_leaves_its_band():
    reason = alarm(_rows([0.4, 0.6, 0.8], [0.45, 0.6, 0.93]), BANDS)
    assert reason and reason.startswith("iteration 20:") and "dark_fraction 0.45 → 0.93" in reason
    assert alarm(_rows([0.4, 0.8], [0.45, 0.55]), BANDS) is None  # within the band (±0.15)
    assert alarm(_rows([0.8, 0.4], [0.45, 0.93]), BANDS) is None  # the reward fell: no hacking to see
    assert alarm(_rows([0.4, 0.4], [0.45, 0.93]), BANDS) is None  # nor rose
    assert alarm(_rows([0.4, 0.5], [0.45, 0.93]), BANDS, reward_rise=0.2) is None  # not risen enough
    assert alarm(_rows([0.4, 0.8], [0.45, 0.93]), BANDS | {"dark_fraction": None}) is None  # not watched
    assert alarm(_rows([0.4], [0.93]), BANDS) is None  # no start to move from
    # the start of each series is its first value: a row without a reward (the base before iteration 1) is skipped
    assert alarm(_rows([None, 0.4, 0.8], [0.45, 0.45, 0.93]), BANDS)


def test_an_eval_reward_that_falls_beyond_its_band_raises_the_alarm_a_rise_does_not():
    assert "eval_reward/clip 0.5 → 0.3" in alarm(_rows([0.4, 0.8], [0.5, 0.5], [0.5, 0.3]), BANDS, eval_band=0.1)
    assert alarm(_rows([0.4, 0.8], [0.5, 0.5], [0.5, 0.9]), BANDS, eval_band=0.1) is None
    assert alarm(_rows([0.4, 0.8], [0.5, 0.5], [0.5, 0.45]), BANDS, eval_band=0.1) is None


def test_the_guards_and_eval_rewards_stay_out_of_the_default_dump():
    dump = TrainConfig().model_dump()
    assert "guards" not in dump and "eval_rewards" not in dump
    cfg = TrainConfig(eval_rewards=[{"name": "strict"}], guards={"dark_fraction": 0.3})
    assert cfg.model_dump()["guards"]["dark_fraction"] == 0.3 and cfg.guards.bands()["dark_fraction"] == 0.3
    with pytest.raises(ValueError, match="named twice"):
        TrainConfig(eval_rewards=[{"name": "strict"}, {"name": "strict"}])


def test_the_train_stage_logs_the_guards_per_logged_iteration(built_project):
    import mlflow

    every, iterations = 2, 4
    params = TINY | {"train": TINY["train"] | {"iterations": iterations, "sample_every": every,
                                               "eval_rewards": [{"name": "strict"}]}}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    try:
        run_stage("train")
    finally:
        Path("params.yaml").write_text(yaml.safe_dump(TINY))
    guards = pl.read_csv("metrics/guards.csv")
    assert guards["iteration"].to_list() == [0, 2, 4]  # the base, then every sample_every iterations
    assert set(guards.columns) >= {"reward", "alarm", "eval_reward_strict", *STATISTICS}
    assert guards["reward"].null_count() == 0 and set(guards["alarm"].to_list()) <= {0, 1}
    assert guards["dark_fraction"].is_between(0, 1).all() and (guards["colour_entropy"] > 0).all()

    client = mlflow.tracking.MlflowClient()
    run = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.stage = 'train'",
                             order_by=["attributes.start_time DESC"]).iloc[0]
    for stat in STATISTICS:
        assert [m.step for m in client.get_metric_history(run["run_id"], f"guard/{stat}")] == [0, 2, 4]
    assert [m.step for m in client.get_metric_history(run["run_id"], "eval_reward/strict")] == [0, 2, 4]
    logged = [m.value for m in client.get_metric_history(run["run_id"], "guard/diversity")]
    assert logged == pytest.approx(guards["diversity"].to_list(), abs=1e-6)


def test_the_guards_draw_nothing_from_the_training_random_streams(built_project, tmp_path):
    """The guard images come from fixed noise of their own: the process's random state is untouched and the same
    model gives the same images, so the training (seeded by (train.seed, iteration, stream)) is the same with them."""
    import torch

    from cogrpo.validate import load_params
    from tasks.train import TrainingSession

    inputs = {"prompts": Path("data/prompts"), "tokenizer": Path("models/tokenizer"), "model": Path("models/base")}
    session = TrainingSession(load_params("params.yaml"), inputs, tmp_path, warn=print)
    before = torch.get_rng_state()
    images = session.sample_images()
    assert torch.equal(torch.get_rng_state(), before)
    assert np.array_equal(images, session.sample_images())
    row, reason = session.guard(images)
    assert row["iteration"] == 0 and row["reward"] is None and reason is None and set(STATISTICS) <= set(row)
