"""Choosing the exported checkpoint by validation (train.validation, cogrpo.core.selection): the rule on hand-made
validations, then the train stage that validates, keeps the chosen checkpoint and exports it."""

import json
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from cogrpo.core.selection import regressions, select_checkpoint, validation_rows
from tests.tiny import TINY, run_stage


def _v(overall, **scores):
    return {"overall": overall, "counting": 0.5, "colors": 0.5, "dpg": 0.5} | scores


def test_validation_rows_take_at_most_per_tag_of_every_tag_and_do_not_depend_on_the_call():
    tags = ["a"] * 10 + ["b"] * 3 + ["c"] * 6
    rows = validation_rows(tags, 4, seed=7)
    assert sorted(rows) == rows == validation_rows(tags, 4, seed=7)
    assert [sum(tags[r] == t for r in rows) for t in "abc"] == [4, 3, 4]
    assert rows != validation_rows(tags, 4, seed=8)


def test_the_best_overall_wins_unless_a_tag_or_dpg_fell_beyond_the_tolerance():
    base = _v(0.40)
    assert select_checkpoint({0: base, 10: _v(0.50), 20: _v(0.60)}, 0.05) == 20
    lost_tag = {0: base, 10: _v(0.50), 20: _v(0.60, counting=0.44)}
    assert regressions(lost_tag[20], base, 0.05) == pytest.approx({"counting": -0.06})
    assert select_checkpoint(lost_tag, 0.05) == 10
    assert select_checkpoint(lost_tag, 0.10) == 20  # within a wider band
    assert select_checkpoint({0: base, 10: _v(0.60, dpg=0.40)}, 0.05) == 0  # only the base is left
    assert select_checkpoint({0: base, 10: _v(0.55), 20: _v(0.55)}, 0.05) == 10  # a tie: the earlier
    assert regressions(_v(0.1), base, 0.05) == {}  # overall itself is the objective, not a guard


def test_the_train_stage_validates_keeps_the_chosen_checkpoint_and_exports_it(built_project):
    every, iterations = 2, 5
    params = TINY | {"train": TINY["train"] | {"iterations": iterations, "checkpoint_every": 100,
                                               "validation": {"every": every, "prompts_per_tag": 2, "samples": 2}}}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    try:
        run_stage("train")
    finally:
        Path("params.yaml").write_text(yaml.safe_dump(TINY))
    record = json.loads(Path("models/trained/train.json").read_text())
    validations = {int(i): v for i, v in record["validations"].items()}
    assert sorted(validations) == [0, 2, 4]  # the base, then every `every` iterations
    assert all(set(v) >= {"overall", "counting", "dpg"} for v in validations.values())
    assert record["selected_iteration"] == select_checkpoint(validations, 0.05)
    assert record["iterations"] == iterations

    (state,) = [d for d in Path("runs/train").iterdir() if (d / "checkpoints").is_dir()
                and (d / "checkpoints" / f"{iterations:06d}").is_dir()]
    kept = {int(c.name) for c in (state / "checkpoints").iterdir()}
    assert {record["selected_iteration"], iterations} <= kept  # the chosen one survives the pruning
    chosen = load_file(str(state / "checkpoints" / f"{record['selected_iteration']:06d}" / "model" / "model.safetensors"))
    exported = load_file("models/trained/model.safetensors")
    assert chosen.keys() == exported.keys() and all((chosen[k] == exported[k]).all() for k in chosen)

    # MLflow: each checkpoint a logged model with its validation linked; the chosen one registered as cogrpo@best
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    best = client.get_model_version_by_alias("cogrpo", "best")
    chosen_model = client.get_logged_model(best.source.removeprefix("models:/"))
    assert chosen_model.tags["cogrpo.iteration"] == str(record["selected_iteration"])
    linked = {m.key: m.value for m in chosen_model.metrics}
    assert linked["val/overall"] == pytest.approx(validations[record["selected_iteration"]]["overall"])
    ranked = client.search_logged_models([chosen_model.experiment_id],
                                         filter_string=f"source_run_id = '{chosen_model.source_run_id}'",
                                         order_by=[{"field_name": "metrics.val/overall", "ascending": False}])
    assert max(validations.values(), key=lambda v: v["overall"])["overall"] == pytest.approx(
        {m.key: m.value for m in ranked[0].metrics}["val/overall"])
