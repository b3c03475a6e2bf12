"""The `pipeline` flow: stages cached by content in the store it shares with the DVC stages, one MLflow parent run
with nested stage runs."""

from pathlib import Path

import pytest

STAGES = ["prompts", "tokenizer", "pretrain", "baseline", "schedule_sweep", "train", "evaluate", "benchmark", "headline"]


@pytest.fixture(scope="module")
def runs(tiny_project):
    """Three executions: fresh, unchanged, and with only the training seed changed."""
    from flows.pipeline import pipeline

    return [pipeline(), pipeline(), pipeline(seed=1)]


def _cached(result) -> dict[str, bool]:
    return {s: result["stages"][s]["cached"] for s in STAGES}


def test_rerun_is_cached_and_a_param_reruns_only_its_dependents(runs):
    first, again, reseeded = runs
    assert not any(_cached(first).values())
    assert all(_cached(again).values())
    assert again["eval"] == first["eval"] and again["baseline"] == first["baseline"]
    assert _cached(reseeded) == {"prompts": True, "tokenizer": True, "pretrain": True, "baseline": True,
                                 "schedule_sweep": True, "train": False, "evaluate": False, "benchmark": False,
                                 "headline": False}
    assert reseeded["stages"]["train"]["out"] != first["stages"]["train"]["out"]
    # outputs are content-addressed folders that hold what the stage wrote
    assert Path(first["stages"]["train"]["out"], "schedule.json").is_file()
    assert Path(first["stages"]["baseline"]["out"], "results.jsonl").is_file()


def test_prefect_shows_every_task_of_the_rerun_cached(runs):
    import asyncio

    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def task_states(flow_run_id: str) -> list[str]:
        async with get_client() as client:
            only = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            return [t.state.name for t in await client.read_task_runs(flow_run_filter=only)]

    assert set(asyncio.run(task_states(runs[0]["prefect_flow_run"]))) == {"Completed"}
    again = asyncio.run(task_states(runs[1]["prefect_flow_run"]))
    assert again == ["Cached"] * len(STAGES)


def test_mlflow_parent_and_nested_runs(runs):
    import mlflow

    df = mlflow.search_runs(experiment_names=["cogrpo"])
    parents = df[df["tags.mlflow.runName"].str.startswith("pipeline")]
    assert len(parents) == 3 and set(parents["status"]) == {"FINISHED"}
    # runs are named by what they are; a stage found in the store adds no run, its parent links to the one that made it
    assert list(parents["tags.mlflow.runName"].sort_values()) == ["pipeline · co · seed 0 · 4 steps"] * 2 + [
        "pipeline · co · seed 1 · 4 steps"]
    first, again, reseeded = ({"stage": df[df["tags.mlflow.parentRunId"] == run["mlflow_run_id"]]} for run in runs)
    assert sorted(first["stage"]["tags.stage"]) == sorted(STAGES) and set(first["stage"]["status"]) == {"FINISHED"}
    assert "train · co · seed 0 · 4 steps" in set(first["stage"]["tags.mlflow.runName"])
    assert again["stage"].empty  # all cached: no duplicate runs, nothing uploaded again
    assert sorted(reseeded["stage"]["tags.stage"]) == ["benchmark", "evaluate", "headline", "train"]
    cached_parent = parents[parents["run_id"] == runs[1]["mlflow_run_id"]].iloc[0]
    made_train = first["stage"][first["stage"]["tags.stage"] == "train"]["run_id"].iloc[0]
    assert cached_parent["tags.stage.train.mlflow_run"] == made_train and cached_parent["tags.stage.train.cached"] == "true"
    p = parents[parents["run_id"] == runs[2]["mlflow_run_id"]].iloc[0]
    assert p["tags.mode"] == "co" and p["params.train.seed"] == "1" and len(p["tags.git_commit"]) > 0
    assert float(p["params.schedule.initial.step1.cfg"]) == 3.0
    assert float(p["params.schedule.learned.step4.ratio"]) < 1e-3  # the last step unmasks everything
    assert p["metrics.eval.heldout.geneval.overall"] >= 0

    client = mlflow.tracking.MlflowClient()
    kids = df[df["tags.mlflow.parentRunId"] == runs[0]["mlflow_run_id"]].set_index("tags.stage")
    prompts = client.get_run(kids.loc["prompts", "run_id"])
    assert {d.dataset.name for d in prompts.inputs.dataset_inputs} == {"train", "eval_heldout", "eval_seen"}
    train = kids.loc["train", "run_id"]
    assert {a.path for a in client.list_artifacts(train)} >= {"model"}
    assert [m.step for m in client.get_metric_history(train, "reward_mean")] == [1, 2, 3]
    assert not client.get_metric_history(train, "model/ratio_mean")  # always 1 at one inner epoch: not charted


def test_bad_override_is_one_line_naming_the_key(tiny_project, capsys):
    from pipelines.pipeline import main

    with pytest.raises(SystemExit) as err:
        main(["--set", "train.learning_rate=3"])
    assert err.value.code == 2
    assert capsys.readouterr().err.strip() == "error: overrides: key 'train.learning_rate': unknown key"
    with pytest.raises(SystemExit):
        main(["--set", "train.rewards=[{name: nope}]"])
    assert capsys.readouterr().err.strip() == ("error: params.yaml with overrides: key 'train.rewards.0.name': "
                                               "unknown reward 'nope' "
                                               "(known: clip, colour_match, colour_novelty, compositional, hpsv2, imagereward, strict)")


def test_compare_reads_the_runs_back(runs, capsys, tmp_path):
    from pipelines.compare import main

    main(["--by", "params.train.seed", "--plot", str(tmp_path / "compare.png")])  # the docstring's spelling
    out = capsys.readouterr().out
    assert runs[0]["mlflow_run_id"][:8] in out and runs[2]["mlflow_run_id"][:8] in out
    assert runs[1]["mlflow_run_id"][:8] not in out  # the cached rerun is the same result: one row
    assert "base model" in out
    seed1 = f"{runs[2]['eval']['heldout']['geneval']['overall']:.3f}"
    assert seed1 in out and (tmp_path / "compare.png").stat().st_size > 1000
    summary = out.split("train.seed")[-1]  # the grouped summary: one row per seed, not one null group
    assert "null" not in summary and all(f"│ {s} " in summary for s in ("0", "1"))
    with pytest.raises(SystemExit) as stop:
        main(["--by", "train.sed", "--plot", str(tmp_path / "x.png")])
    assert stop.value.code == 2 and "train.sed" in capsys.readouterr().err


@pytest.mark.slow  # keeps `make test` within 10 minutes on 2 cores; `make bench` runs it
def test_two_experiments_at_once_do_not_clobber_each_other(tiny_project, tmp_path):
    """Two `pipeline` processes started together on one project: shared stages are computed once, each
    training gets its own folder, each execution its own MLflow runs."""
    import os
    import subprocess
    import sys

    import mlflow
    from prefect.settings import get_current_settings

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env |= {"PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            "PREFECT_API_URL": str(get_current_settings().api.url)}
    root = str(tmp_path / "shared")
    procs = [subprocess.Popen([sys.executable, "-m", "pipelines.pipeline", "--seed", str(s), "--root", root],
                              cwd=tiny_project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for s in (11, 12)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    assert len(list(Path(root, "store", "prompts").iterdir())) == 1  # same key: one folder, written once
    assert len(list(Path(root, "store", "train").iterdir())) == 2
    df = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.mlflow.runName LIKE 'pipeline%'")
    parents = df[df["params.train.seed"].isin(["11", "12"])]
    assert len(parents) == 2 and set(parents["status"]) == {"FINISHED"}
    for run_id in parents["run_id"]:
        kids = mlflow.search_runs(experiment_names=["cogrpo"], filter_string=f"tags.mlflow.parentRunId = '{run_id}'")
        assert {"train", "evaluate"} <= set(kids["tags.stage"]) and set(kids["status"]) == {"FINISHED"}


def test_benchmark_flow_evaluates_a_trained_model_at_other_step_counts(runs):
    from flows.pipeline import benchmark

    st = runs[0]["stages"]
    kw = {"trained_dir": st["train"]["out"], "base_dir": st["pretrain"]["out"], "prompts_dir": st["prompts"]["out"],
          "tokenizer_dir": st["tokenizer"]["out"]}
    scores = benchmark(steps=[4, 3], variants=["trained-learned"], **kw)["embedded"]
    # the learned schedule at its own step count is the pipeline's evaluation; carried to 3 steps it differs
    assert scores["geneval.overall"]["trained-learned"]["4"] == runs[0]["eval"]["heldout"]["geneval"]["overall"]
    assert scores["dpg.score"]["trained-learned"]["4"] == runs[0]["eval"]["heldout"]["dpg"]["score"]
    assert scores["dpg.score"]["trained-learned"]["3"] != scores["dpg.score"]["trained-learned"]["4"]
    from prefect.artifacts import Artifact

    table = Artifact.get("benchmark")  # the run ends with its scores where the UI shows them
    assert table is not None and "geneval.overall" in str(table.data)
    assert benchmark(steps=[4, 3], variants=["trained-learned"], **kw)["embedded"] == scores  # found in the store
    assert benchmark(trained_dir="nowhere", return_state=True).is_failed()


@pytest.mark.slow  # keeps `make test` within 10 minutes on 2 cores; `make bench` runs it
def test_dvc_stages_find_what_the_flow_computed(runs):
    """The other way in: after the flow, every DVC stage finds its result in the store (same params and code),
    computes nothing, and materialises the same bytes in the workspace."""
    import mlflow

    from tests.tiny import run_stage

    store = Path("runs/store")
    before = {p for p in store.rglob("*")}
    mlflow_runs = len(mlflow.search_runs(experiment_names=["cogrpo"]))
    for name in STAGES:
        run_stage(name)
    assert {p for p in store.rglob("*")} == before  # nothing new was computed
    assert len(mlflow.search_runs(experiment_names=["cogrpo"])) == mlflow_runs  # and no duplicate MLflow runs
    assert Path("metrics/eval.json").is_file() and Path("models/trained/schedule.json").is_file()
    heldout = runs[0]["eval"]["heldout"]
    import json

    assert Path("metrics/eval.json").read_text() == json.dumps(heldout, indent=1) + "\n"  # same bytes as computed


def test_every_flow_run_is_named_by_what_it_is(runs):
    """No random names (`imposing-clam`): the pipeline and the training subflow say mode, seed and steps."""
    import asyncio

    from prefect import get_client

    async def names() -> list[str]:
        async with get_client() as client:
            return [r.name for r in await client.read_flow_runs()]

    found = asyncio.run(names())
    assert "co-grpo · co · seed 0 · 4 steps" in found and "pipeline · co · seed 1 · 4 steps" in found
    assert all(n.startswith(("pipeline · ", "co-grpo · ", "stage-", "benchmark")) for n in found), found


def test_an_entry_point_without_a_named_api_runs_a_prefect_server_of_its_own(monkeypatch):
    """What `dvc repro` gets (PREFECT_API_URL unset; the tests name theirs): a server up for the block, answering,
    gone after it."""
    import httpx

    from adapters.prefect_api import temporary_api

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with temporary_api() as url:
        assert url and httpx.get(f"{url}/health", timeout=5).status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{url}/health", timeout=2)


def test_a_flow_run_whose_process_was_killed_is_marked_crashed_by_the_next_start(prefect_api):
    """kill -9 leaves a flow run RUNNING forever (nothing records its end); the next entry point marks it Crashed."""
    import asyncio
    import subprocess
    import sys

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    from adapters.prefect_api import HOST_TAG, PID_TAG, crash_dead_runs, run_tags

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process that is no more

    @flow(name="killed")
    def killed() -> None:
        pass

    async def make(pid_tag: str):
        async with get_client() as client:
            run = await client.create_flow_run(killed, tags=[pid_tag, run_tags()[1]], state=Running())
            return run.id

    async def state_of(run_id):
        async with get_client() as client:
            return (await client.read_flow_run(run_id)).state.type.value

    dead, alive = asyncio.run(make(f"{PID_TAG}{gone.pid}")), asyncio.run(make(run_tags()[0]))
    assert run_tags()[1].startswith(HOST_TAG)
    crash_dead_runs()
    assert asyncio.run(state_of(dead)) == "CRASHED" and asyncio.run(state_of(alive)) == "RUNNING"
