"""A tiny end-to-end run of the DVC stages' entry points (real Prefect flows, a real MLflow store)."""

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest
import yaml


def test_stages_in_order(tiny_project):
    from pipelines import baseline, evaluate, pretrain, prompts, schedule_sweep, tokenizer, train

    for stage in (prompts, tokenizer, pretrain, baseline, schedule_sweep, train, evaluate):
        stage.main()

    split = json.loads(Path("metrics/prompts.json").read_text())
    assert split["eval_heldout"]["per_tag"]["color_attr"] == 3 and split["heldout"]["color_shapes"]
    assert pl.read_parquet("data/prompts/train.parquet").height == split["train"]["prompts"]
    assert json.loads(Path("metrics/tokenizer.json").read_text())["roundtrip_pass_eval_heldout"] >= 0.98
    assert Path("models/base/model.safetensors").is_file() and Path("models/base/config.json").is_file()
    assert Path("metrics/pretrain_loss.csv").read_text().count("\n") == 1 + 3

    base = json.loads(Path("metrics/baseline.json").read_text())
    assert set(base) == {"geneval", "dpg", "steps"} and base["steps"] == 4
    assert set(base["geneval"]) >= {"overall", "single_object", "two_object", "counting", "colors", "position", "color_attr"}
    rows = [json.loads(line) for line in Path("outputs/baseline/results.jsonl").read_text().splitlines()]
    assert {"filename", "tag", "correct", "reason", "metadata"} <= set(rows[0])
    assert all((Path("outputs/baseline") / r["filename"]).is_file() for r in rows)
    assert len(rows) == 2 * pl.read_parquet("data/prompts/eval_heldout.parquet").height
    sweep = json.loads(Path("metrics/schedule_sweep.json").read_text())
    assert set(sweep["schedules"]) == {"base", "cold"}

    import mlflow

    learned = json.loads(Path("metrics/learned_schedule.json").read_text())
    assert [r["step"] for r in learned] == [1, 2, 3, 4] and all(r["cfg"] > 0 for r in learned)
    assert json.loads(Path("runs/train/checkpoint/train_state.json").read_text())["iteration"] == 3
    assert set(json.loads(Path("metrics/eval.json").read_text())) == {"geneval", "dpg", "steps"}

    runs = mlflow.search_runs(experiment_names=["cogrpo"])
    assert set(runs["tags.mlflow.runName"]) == {"prompts", "tokenizer", "pretrain", "baseline", "schedule_sweep",
                                                "train", "evaluate"}
    tr = runs[runs["tags.mlflow.runName"] == "train"].iloc[0]
    assert tr["params.train.mode"] == "co"
    client = mlflow.tracking.MlflowClient()
    assert [m.step for m in client.get_metric_history(tr["run_id"], "reward_mean")] == [1, 2, 3]
    assert client.get_metric_history(tr["run_id"], "schedule/step3/cfg")
    assert {a.path for a in client.list_artifacts(tr["run_id"], "samples")} == {"samples/iter_0002.png"}
    assert {d.dataset.name for d in client.get_run(tr["run_id"]).inputs.dataset_inputs} == {"train"}
    assert float(tr["params.schedule.initial.step1.cfg"]) == 3.0 and tr["params.schedule.learned.step4.cfg"]
    assert set(runs["status"]) == {"FINISHED"} and tr["tags.mode"] == "co" and tr["tags.git_commit"]
    pre = runs[runs["tags.mlflow.runName"] == "pretrain"].iloc[0]
    assert pre["params.pretrain.steps"] == "12" and pre["status"] == "FINISHED"
    history = mlflow.tracking.MlflowClient().get_metric_history(pre["run_id"], "loss")
    assert [m.step for m in history] == [4, 8, 12]


def test_bad_params_stop_before_writing(tiny_project, capsys):
    from pipelines import prompts

    shutil.rmtree("data", ignore_errors=True)
    good = Path("params.yaml").read_text()
    Path("params.yaml").write_text(good + "\nbogus: 1\n")
    try:
        with pytest.raises(SystemExit) as err:
            prompts.main()
        assert err.value.code == 2
        assert "params.yaml: key 'bogus': unknown key" in capsys.readouterr().err
        assert not Path("data").exists()
    finally:
        Path("params.yaml").write_text(good)
