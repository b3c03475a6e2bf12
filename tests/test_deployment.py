"""The served deployments against a real Prefect API: registered with typed parameters, a triggered run of
`pipeline/cogrpo` completes, and its stages land where the parameters say."""

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def served(built_project):
    import shutil

    from prefect.settings import get_current_settings

    # the triggered run's root (runs/served) starts with the built project's store, as a copied store would: the
    # stages its parameters leave alone are found done there (suite time), the training it asks for is not
    shutil.copytree("runs/store", "runs/served/store")

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}  # each project its own store
    env |= {"PYTHONPATH": str(ROOT), "PREFECT_API_URL": str(get_current_settings().api.url),
            "PREFECT_RUNNER_POLL_FREQUENCY": "1"}  # the runner looks for triggered runs every second, not every 10
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.serve"], cwd=built_project, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield built_project
    proc.terminate()
    proc.wait(timeout=60)


async def _deployment(name: str, timeout: float = 120):
    from prefect import get_client

    async with get_client() as client:
        end = time.monotonic() + timeout
        while True:
            try:
                return await client.read_deployment_by_name(name)
            except Exception:
                if time.monotonic() > end:
                    raise
                await asyncio.sleep(1)


async def _artifacts(flow_run_id):
    """Every artifact of a flow run and of the task and flow runs under it."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        subflows = [f.id for f in await client.read_flow_runs() if f.parent_task_run_id is not None]
        ids = [flow_run_id, *subflows]
        return await client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=ids)))


def test_deployments_have_typed_parameters_and_a_schedule(served):
    pipe = asyncio.run(_deployment("pipeline/cogrpo"))
    props = pipe.parameter_openapi_schema["properties"]
    assert set(props) == {"params_file", "mode", "steps", "seed", "overrides", "root"}
    mode = props["mode"]["anyOf"][0]
    assert mode["enum"] == ["co", "model", "schedule", "alternate"]
    # the custom-run form explains every field, and what leaving it empty means
    assert all(props[p].get("description") for p in props)
    assert "Empty: train.mode of params_file" in props["mode"]["description"]
    assert '"train.lr_schedule": 0.3' in props["overrides"]["description"]
    nightly = asyncio.run(_deployment("pipeline/nightly"))
    assert nightly.schedules[0].schedule.cron == "0 2 * * *" and not nightly.schedules[0].active
    bench = asyncio.run(_deployment("benchmark/cogrpo")).parameter_openapi_schema["properties"]
    assert {"trained_dir", "suites", "steps", "variants"} <= set(bench) and all(bench[p].get("description") for p in bench)
    assert set(bench["suites"]["anyOf"][0]["items"]["enum"]) == {"embedded", "embedded_seen", "geneval", "dpg",
                                                                 "imagereward", "hpsv2"}
    shard = asyncio.run(_deployment("generate/cogrpo")).parameter_openapi_schema["properties"]
    assert set(shard["stage"]["enum"]) == {"baseline", "evaluate", "benchmark"} and shard["shard"]["type"] == "integer"
    assert all(shard[p].get("description") for p in shard)


def test_a_triggered_run_completes(served):
    from prefect.deployments import run_deployment

    asyncio.run(_deployment("pipeline/cogrpo"))
    run = run_deployment("pipeline/cogrpo", parameters={"mode": "schedule", "seed": 3, "root": "runs/served"},
                         timeout=300, poll_interval=2)
    assert run.state.is_completed(), run.state
    assert run.name == "pipeline · schedule · seed 3 · 4 steps"  # named by what it is
    trained = list(Path(served, "runs/served/store/train").glob("train-*/out/schedule.json"))
    assert len(trained) == 2  # the built project's and the triggered one
    # what the UI shows of the run: progress of its long tasks, the results table, the learned schedule
    artifacts = asyncio.run(_artifacts(run.id))
    assert {a.key for a in artifacts} >= {"results", "learned-schedule"}
    results = next(a for a in artifacts if a.key == "results")
    assert "geneval.overall" in str(results.data)
    progress = [a for a in artifacts if a.type == "progress"]
    assert any(a.data == 100.0 for a in progress)
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{served / 'mlflow.db'}")
    parent = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.mlflow.runName LIKE 'pipeline%'")
    assert list(parent["tags.mode"]) == ["schedule"] and list(parent["params.train.seed"]) == ["3"]


@pytest.mark.slow  # suite time; the same params check through the CLI: tests/test_pipeline_flow.py
def test_a_bad_parameter_fails_the_run_with_one_line(served):
    from prefect.deployments import run_deployment

    asyncio.run(_deployment("pipeline/cogrpo"))
    run = run_deployment("pipeline/cogrpo", parameters={"overrides": {"train.learning_rate": 3}}, timeout=120,
                         poll_interval=1)
    assert run.state.is_failed()
    assert run.state.message == "bad parameters: overrides: key 'train.learning_rate': unknown key"
    # what the UI's log shows: the line, and no traceback (Prefect's engine logs one for any Failed end)
    end, logs = time.monotonic() + 60, []
    while not any(m.startswith("Finished in state") for m in logs) and time.monotonic() < end:  # sent in batches
        time.sleep(1)
        logs = [log.message for log in asyncio.run(_logs(run.id))]
    assert sum("bad parameters: overrides" in m for m in logs) == 2, logs  # the error line, the final state
    assert not any("Traceback" in m or "Engine execution exited" in m for m in logs), logs


async def _logs(flow_run_id):
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    async with get_client() as client:
        return await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))


@pytest.mark.slow  # suite time; the triggered-run test stays
def test_the_nightly_schedule_switches_on_as_documented_and_survives_a_restart(served):
    """`prefect deployment schedule resume pipeline/nightly <id>` (as the README says) switches it on; serving again
    (what a restart of `python -m pipelines.serve` does: re-register every deployment) keeps it on."""
    from prefect.settings import get_current_settings

    nightly = asyncio.run(_deployment("pipeline/nightly"))
    (schedule,) = nightly.schedules
    assert not nightly.paused and not schedule.active
    env = os.environ | {"PREFECT_API_URL": str(get_current_settings().api.url), "PYTHONPATH": str(ROOT)}
    prefect = str(Path(sys.executable).parent / "prefect")
    done = subprocess.run([prefect, "deployment", "schedule", "resume", "pipeline/nightly", str(schedule.id)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    nightly = asyncio.run(_deployment("pipeline/nightly"))
    assert nightly.schedules[0].active
    again = subprocess.Popen([sys.executable, "-m", "pipelines.serve"], cwd=served, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 120
        while asyncio.run(_deployment("pipeline/nightly")).updated == nightly.updated:  # not yet re-registered
            assert time.monotonic() < end, "the second serve never re-registered the deployments"
            time.sleep(1)
    finally:
        again.terminate()
        again.wait(timeout=60)
    (after,) = asyncio.run(_deployment("pipeline/nightly")).schedules
    assert after.active and after.schedule.cron == "0 2 * * *"
