"""A tiny end-to-end run of the DVC stages' entry points (real Prefect flows, a real MLflow store)."""

import json
import os
import re
import shutil
from pathlib import Path

import polars as pl
import torch
import pytest
import yaml

from tests.tiny import run_stage


def test_stages_in_order(built_project):
    """What every stage wrote when `dvc repro`'s commands ran in order (conftest's tiny_built, warnings as errors)."""
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
    dpg = [json.loads(line) for line in Path("outputs/baseline/results_dpg.jsonl").read_text().splitlines()]
    assert {"filename", "tag", "correct", "reason", "metadata"} <= set(rows[0])
    assert all((Path("outputs/baseline") / r["filename"]).is_file() for r in rows + dpg)
    assert len(rows) + len(dpg) == 2 * pl.read_parquet("data/prompts/eval_heldout.parquet").height
    assert {r["tag"] for r in dpg} == {"dpg"} and "dpg" not in {r["tag"] for r in rows}
    # what GenEval's summary_scores.py prints as "Overall score (avg. over tasks)": the mean over the tags in the
    # file of each tag's fraction of correct images
    per_tag = pl.read_ndjson("outputs/baseline/results.jsonl").group_by("tag").agg(pl.col("correct").mean())
    assert per_tag.height == 6 and per_tag["correct"].mean() == pytest.approx(base["geneval"]["overall"], abs=1e-12)
    sweep = json.loads(Path("metrics/schedule_sweep.json").read_text())
    assert set(sweep["schedules"]) == {"base", "cold"}

    # the benchmark stage at the schedule's own step count is the evaluation stages, byte for byte
    for stage, variant in (("baseline", "base-base"), ("eval", "trained-learned")):
        cell = Path("outputs/benchmark") / variant / "steps_04" / "embedded"
        for name in ("results.jsonl", "results_dpg.jsonl", "00003/samples/0001.png"):
            mine = cell / ("images/" + name if name.endswith(".png") else name)
            assert mine.read_bytes() == (Path("outputs") / stage / name).read_bytes(), (stage, name)
    scores = json.loads(Path("metrics/benchmark.json").read_text())
    assert set(scores["embedded"]["geneval.overall"]) == {"base-base", "trained-learned"}
    assert scores["embedded"]["geneval.overall"]["trained-learned"]["4"] == json.loads(
        Path("metrics/eval.json").read_text())["geneval"]["overall"]
    assert set(scores["embedded"]["dpg.score"]["base-base"]) == {"2", "4"}
    report = Path("reports/benchmarks.md").read_text()
    assert re.search(r"\| embedded \| geneval.overall +\| trained +\| learned +\|", report) and "| 2 steps" in report
    assert Path("metrics/plots/benchmark_steps.png").stat().st_size > 5000

    import mlflow

    learned = json.loads(Path("metrics/learned_schedule.json").read_text())
    assert [r["step"] for r in learned] == [1, 2, 3, 4] and all(r["cfg"] > 0 for r in learned)
    (state,) = Path("runs/train").iterdir()  # the training's own folder, named by its identity
    assert sorted(p.name for p in (state / "checkpoints").iterdir()) == ["000002", "000003"]
    assert json.loads((state / "checkpoints/000003/train_state.json").read_text())["iteration"] == 3
    assert not (state / ".lock").exists()  # a clean exit leaves no lock behind
    assert set(json.loads(Path("metrics/pretrain.json").read_text())) == {"final_loss", "steps"}  # no wall clock
    assert set(json.loads(Path("metrics/eval.json").read_text())) == {"geneval", "dpg", "steps"}
    head = json.loads(Path("metrics/headline.json").read_text())  # what `dvc metrics show` leads with
    assert head["heldout"] == {"base": base["geneval"]["overall"],
                               "trained": json.loads(Path("metrics/eval.json").read_text())["geneval"]["overall"]}
    assert head["train"]["mode"] == "co" and 0 <= head["train"]["reward"] <= 1

    runs = mlflow.search_runs(experiment_names=["cogrpo"])
    assert mlflow.get_experiment_by_name("cogrpo").tags["mlflow.experimentKind"] == "custom_model_development"
    assert set(runs["tags.stage"]) == {"prompts", "tokenizer", "pretrain", "baseline", "schedule_sweep",
                                                "train", "evaluate", "benchmark", "headline"}
    tr = runs[runs["tags.stage"] == "train"].iloc[0]
    from cogrpo.io import content_hash  # provenance: the files the run read and wrote, after the run

    assert tr["tags.input.model.sha256"] == content_hash("models/base")
    assert tr["tags.output.sha256"] == content_hash("models/trained")
    assert tr["tags.mlflow.runName"] == "train · co · seed 0 · 4 steps"
    assert tr["params.train.mode"] == "co"
    client = mlflow.tracking.MlflowClient()
    assert [m.step for m in client.get_metric_history(tr["run_id"], "reward_mean")] == [1, 2, 3]
    assert client.get_metric_history(tr["run_id"], "schedule/step3/cfg")
    # on-policy (one inner epoch) both surrogate losses are −mean(advantage): not logged as two equal curves
    assert not client.get_metric_history(tr["run_id"], "model/loss")
    assert client.get_metric_history(tr["run_id"], "model/kl")
    images = [a.path for a in client.list_artifacts(tr["run_id"], "images")]  # under one key: the UI's step slider
    assert len(images) == 2 and all(p.startswith("images/samples+step+2+") for p in images), images  # png + webp
    # every checkpoint an MLflow logged model with its iteration's metrics; the exported one registered, alias "last"
    models = {m.name: m for m in client.search_logged_models([tr["experiment_id"]],
                                                             filter_string=f"source_run_id = '{tr['run_id']}'")}
    assert set(models) == {"checkpoint-000002", "checkpoint-000003"}
    last = models["checkpoint-000003"]
    assert {m.key: m.step for m in last.metrics}["reward_mean"] == 3
    artifacts = {Path(a.path).name for a in client.list_logged_model_artifacts(last.model_id)}
    assert artifacts >= {"schedule.json", "config.json"}
    assert client.get_model_version_by_alias("cogrpo", "last").source == f"models:/{last.model_id}"
    assert {d.dataset.name for d in client.get_run(tr["run_id"]).inputs.dataset_inputs} == {"train"}
    assert float(tr["params.schedule.initial.step1.cfg"]) == 3.0 and tr["params.schedule.learned.step4.cfg"]
    assert set(runs["status"]) == {"FINISHED"} and tr["tags.mode"] == "co" and tr["tags.git_commit"]
    ev = runs[runs["tags.stage"] == "evaluate"].iloc[0]
    assert {a.path for a in client.list_artifacts(ev["run_id"])} >= {"results.json", "samples"}  # a table, a grid
    assert Path("metrics/plots/learned_schedule.png").stat().st_size > 5000  # plots that render offline
    pre = runs[runs["tags.stage"] == "pretrain"].iloc[0]
    assert pre["params.pretrain.steps"] == "12" and pre["status"] == "FINISHED"
    history = mlflow.tracking.MlflowClient().get_metric_history(pre["run_id"], "loss")
    assert [m.step for m in history] == [4, 8, 12]


def test_the_flow_finds_what_dvc_stages_computed(built_project):
    """One cache for both ways in: after the DVC stages (test above), the `pipeline` flow recomputes nothing —
    every stage is Cached in Prefect — and reports the same numbers."""
    from flows.pipeline import pipeline

    store = Path("runs/store")
    before = {p for p in store.rglob("*")}
    result = pipeline()
    assert all(s["cached"] for s in result["stages"].values()), result["stages"]
    assert {p for p in store.rglob("*")} == before
    assert result["eval"]["heldout"] == json.loads(Path("metrics/eval.json").read_text())


@pytest.mark.slow  # keeps `make test` within 10 minutes on 2 cores; `make bench` runs it
def test_an_evaluation_is_the_same_bytes_in_two_processes(built_project, tmp_path):
    """Same inputs → same bytes: the baseline evaluated afresh in two processes with different hash seeds writes
    identical outputs (so DVC's hash of outputs/baseline does not change from run to run)."""
    import subprocess
    import sys

    from prefect.settings import get_current_settings

    root = Path(__file__).resolve().parents[1]
    outputs = []
    for seed in ("1", "2"):
        shutil.rmtree("runs/store/baseline", ignore_errors=True)
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        env |= {"PYTHONHASHSEED": seed, "PYTHONPATH": f"{root}{os.pathsep}{root / 'src'}",
                "PREFECT_API_URL": str(get_current_settings().api.url)}
        done = subprocess.run([sys.executable, "-m", "pipelines.stage", "baseline"], env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append({str(p.relative_to("outputs/baseline")): p.read_bytes()
                        for p in sorted(Path("outputs/baseline").rglob("*")) if p.is_file()})
    assert outputs[0] == outputs[1] and len(outputs[0]) > 3


def test_an_evaluation_generated_in_shards_is_the_bytes_of_one_process(built_project, tmp_path):
    """Shard 1 of 2 (`python -m pipelines.generate baseline --shard 1 --shards 2`, the `generate` flow) makes its
    batches into the stage's state folder; the stage then makes the rest and scores: outputs byte-identical to the
    stage run alone."""
    from pipelines.generate import main as generate
    from tests.tiny import TINY

    def fresh_baseline() -> None:
        shutil.rmtree("runs/store/baseline", ignore_errors=True)
        shutil.rmtree("runs/baseline", ignore_errors=True)  # its state folder: the cells

    def outputs() -> dict[str, bytes]:
        return {str(p.relative_to("outputs/baseline")): p.read_bytes()
                for p in sorted(Path("outputs/baseline").rglob("*")) if p.is_file()}

    saved = ("runs/store/baseline", "runs/baseline", "outputs/baseline", "metrics")
    for folder in saved:  # put back afterwards, byte for byte
        shutil.copytree(folder, tmp_path / "kept" / folder)
    Path("params.yaml").write_text(yaml.safe_dump(TINY | {"eval": TINY["eval"] | {"batch_prompts": 5}}))
    try:
        fresh_baseline()
        run_stage("baseline")
        alone = outputs()
        fresh_baseline()
        shard = generate(["baseline", "--shard", "1", "--shards", "2"])
        heldout = Path(shard["state_folder"]) / "heldout" / "done"
        assert sorted(p.name for p in heldout.iterdir()) == ["00001", "00003"]  # 18 prompts, 4 batches: odd ones
        assert shard["batches_generated"]["heldout"] == 2
        run_stage("baseline")
        assert outputs() == alone and len(alone) > 20
    finally:
        Path("params.yaml").write_text(yaml.safe_dump(TINY))
        for folder in saved:
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(tmp_path / "kept" / folder, folder)


def test_bad_params_stop_before_writing(prefect_api, tmp_path, monkeypatch, capsys):
    from tests.tiny import TINY

    monkeypatch.chdir(tmp_path)  # a fresh project: nothing there yet
    Path("params.yaml").write_text(yaml.safe_dump(TINY) + "\nbogus: 1\n")
    with pytest.raises(SystemExit) as err:
        run_stage("prompts")
    assert err.value.code == 2
    assert "params.yaml: key 'bogus': unknown key" in capsys.readouterr().err
    assert not Path("data").exists()


def test_a_file_system_failure_is_one_line(prefect_api, tmp_path):
    """A folder the run must write is not one (as a full disk or a read-only mount would be): one line, exit 1,
    no traceback on the terminal (Prefect's own log line of the failed run stays)."""
    import subprocess
    import sys

    from tests.tiny import TINY

    (tmp_path / "params.yaml").write_text(yaml.safe_dump(TINY))
    (tmp_path / "runs").write_text("a file where the store's folder goes")
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parents[1])}  # the session's Prefect API (prefect_api)
    done = subprocess.run([sys.executable, "-m", "pipelines.stage", "prompts"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "error: runs/locks: Not a directory" and "Traceback" not in done.stderr


def test_a_prefect_api_that_does_not_answer_is_one_line(tmp_path):
    """PREFECT_API_URL naming a server that is not there: one line saying what to do, exit 1, in seconds."""
    import subprocess
    import sys

    from tests.tiny import TINY

    (tmp_path / "params.yaml").write_text(yaml.safe_dump(TINY))
    env = os.environ | {"PREFECT_API_URL": "http://127.0.0.1:9/api", "PYTHONPATH": str(Path(__file__).parents[1])}
    done = subprocess.run([sys.executable, "-m", "pipelines.stage", "prompts"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["error: the Prefect API at http://127.0.0.1:9/api does not answer: start "
                                                "it (`prefect server start`) or unset PREFECT_API_URL to let the run "
                                                "start one of its own"]


def test_a_copied_checkout_keeps_its_mlflow_artifacts_to_itself(built_project, tmp_path):
    """MLflow stores artifact folders as absolute paths; the project's store follows the checkout it is in: runs in
    a copy write their artifacts into the copy, old runs' artifacts resolve there too, the original is untouched."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from adapters import tracking

    copy = tmp_path / "copy"
    shutil.copytree(built_project, copy, ignore=shutil.ignore_patterns("runs", "outputs", ".prefect"))
    original = sorted(p for p in Path("mlartifacts").rglob("*"))
    try:
        tracking.setup(copy)
        client = MlflowClient()
        exp = mlflow.get_experiment_by_name(tracking.EXPERIMENT)
        assert exp.artifact_location == (copy / "mlartifacts").as_uri()
        old = client.search_runs([exp.experiment_id], "tags.stage = 'train'")[0]
        assert old.info.artifact_uri.startswith((copy / "mlartifacts").as_uri())
        assert {a.path for a in client.list_artifacts(old.info.run_id)} >= {"model"}  # the copied files
        assert mlflow.get_experiment_by_name("Default").artifact_location.startswith(str(copy))
        checkpoint = client.search_logged_models([exp.experiment_id])[0]
        assert checkpoint.artifact_location.startswith((copy / "mlartifacts").as_uri())
        assert not Path(old.data.tags["cogrpo.run_dir"]).is_absolute()  # names the copy's folder as the original's
        with tracking.run("in the copy") as run_id:
            (tmp_path / "note.txt").write_text("hello")
            tracking.log_artifacts_file(run_id, tmp_path / "note.txt", "notes")
        assert (copy / "mlartifacts").is_dir() and list((copy / "mlartifacts").rglob("note.txt"))
        assert sorted(p for p in Path("mlartifacts").rglob("*")) == original
    finally:
        tracking.setup(built_project)


def test_a_dvc_repro_parent_run_carries_the_headline_metrics(built_project, monkeypatch):
    """The parent run of a `dvc repro` / `dvc exp run` holds what `dvc metrics show` shows, so MLflow's chart view
    compares experiments (the stage's result found in the store: no stage run, the parent still gets them)."""
    import mlflow

    from adapters import tracking
    from flows.pipeline import stage

    monkeypatch.setenv("DVC_STAGE", "headline")
    monkeypatch.setattr(tracking, "_dvc_pid", lambda: 424242)
    stage("headline")
    (parent,) = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.`cogrpo.dvc_pid` = '424242'",
                                   output_format="list")
    head = json.loads(Path("metrics/headline.json").read_text())
    assert parent.data.metrics["heldout.trained"] == pytest.approx(head["heldout"]["trained"])
    assert parent.data.metrics["train.reward"] == pytest.approx(head["train"]["reward"])


@pytest.mark.parametrize("cmdline, runs_dvc", [
    (["dvc", "repro"], True), (["/v/bin/python", "/v/bin/dvc", "exp", "run"], True),
    (["/v/bin/python", "-m", "dvc", "repro"], True),  # make run (pipelines.repro) starts dvc this way
    (["/v/bin/python", "-m", "pipelines.repro"], False), (["/bin/sh", "-c", "python -m pipelines.stage x"], False)])
def test_the_dvc_process_behind_a_stage_is_recognised_however_dvc_was_started(cmdline, runs_dvc):
    from adapters.tracking import is_dvc

    assert is_dvc(cmdline) is runs_dvc


def test_a_damaged_store_entry_is_set_aside_and_computed_again(built_project, caplog):
    """A store entry whose files no longer match its manifest is never used: set aside with one line naming the
    file, then computed again, to the same bytes."""
    from flows.pipeline import stage

    (entry,) = Path("runs/store/prompts").glob("prompts-*")
    before = (entry / "out/train.parquet").read_bytes()
    (entry / "out/train.parquet").write_bytes(before[:-8] + b"damaged!")
    stage("prompts")
    (aside,) = Path("runs/store/prompts").glob(".damaged-*")
    assert aside.name.startswith(f".damaged-{entry.name}-")
    assert (entry / "out/train.parquet").read_bytes() == before == Path("data/prompts/train.parquet").read_bytes()
    warned = [r.getMessage() for r in caplog.records if "store entry is damaged" in r.getMessage()]
    assert len(warned) == 1 and "train.parquet: contents differ from its manifest" in warned[0], warned


def test_export_mix_exports_the_update_scaled_toward_the_base_without_training_again(built_project):
    """train.export_mix (WiSE-FT): a finished run exports again under another mix, from its last checkpoint, without
    a training iteration; the exported weights are base + mix · (trained − base), the learned schedule whole."""
    from safetensors.torch import load_file

    base, trained = (load_file(f"models/{m}/model.safetensors") for m in ("base", "trained"))
    schedule = Path("models/trained/schedule.json").read_bytes()
    history = Path("metrics/train_history.csv").read_text()
    params = yaml.safe_load(Path("params.yaml").read_text())
    try:
        Path("params.yaml").write_text(yaml.safe_dump(params | {"train": params["train"] | {"export_mix": 0.25}}))
        run_stage("train")
        mixed = load_file("models/trained/model.safetensors")
        assert all(torch.allclose(mixed[k], base[k] + 0.25 * (trained[k] - base[k]), atol=1e-6) for k in trained)
        assert any(not torch.equal(mixed[k], trained[k]) for k in trained)
        assert Path("models/trained/schedule.json").read_bytes() == schedule
        assert Path("metrics/train_history.csv").read_text() == history  # resumed at the end: nothing trained
        assert json.loads(Path("models/trained/train.json").read_text())["export_mix"] == 0.25
    finally:
        Path("params.yaml").write_text(yaml.safe_dump(params))
        run_stage("train")  # the store's entry: the module's other tests see the unmixed model
    assert load_file("models/trained/model.safetensors").keys() == trained.keys()
