"""kill -9 in the middle of training, rerun the same command: it resumes from the last checkpoint, the dead
MLflow run is marked FAILED, and the result equals an uninterrupted run with the same seed."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.tiny import TINY

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS, EVERY = 12, 3


@pytest.fixture(scope="module")
def trained_inputs(tiny_project):
    """Prompts, tokenizer and base model of the tiny project, and a longer training run to interrupt."""
    from pipelines import pretrain, prompts, tokenizer

    for stage in (prompts, tokenizer, pretrain):
        stage.main()
    params = TINY | {"train": TINY["train"] | {"iterations": ITERATIONS, "checkpoint_every": EVERY,
                                               "sample_every": 100}}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    return tiny_project


def _train_cmd(cwd: Path) -> subprocess.Popen:
    from prefect.settings import get_current_settings

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}  # each project its own store
    env |= {"PYTHONPATH": str(ROOT), "PREFECT_API_URL": str(get_current_settings().api.url)}
    return subprocess.Popen([sys.executable, "-m", "pipelines.train"], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _iterations_done(cwd: Path) -> int:
    history = cwd / "runs/train/history.jsonl"
    return len(history.read_text().splitlines()) if history.is_file() else 0


def test_kill_9_then_rerun_resumes_and_matches_an_uninterrupted_run(trained_inputs, tmp_path):
    import mlflow

    work = trained_inputs
    reference = tmp_path / "reference"  # same inputs, never interrupted
    reference.mkdir()
    for item in ("params.yaml", "data", "models"):
        src = work / item
        shutil.copytree(src, reference / item) if src.is_dir() else shutil.copy(src, reference / item)

    proc = _train_cmd(work)
    while _iterations_done(work) < EVERY + 1 and proc.poll() is None:
        time.sleep(0.01)
    assert proc.poll() is None, "training finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_at_kill = _iterations_done(work)
    assert 0 < done_at_kill < ITERATIONS

    resumed = _train_cmd(work)
    assert resumed.wait() == 0, resumed.stderr.read()
    uninterrupted = _train_cmd(reference)
    assert uninterrupted.wait() == 0, uninterrupted.stderr.read()

    for f in ("models/trained/model.safetensors", "models/trained/schedule.json", "metrics/learned_schedule.json",
              "metrics/train_history.csv"):
        assert (work / f).read_bytes() == (reference / f).read_bytes(), f
    history = [json.loads(x) for x in (work / "runs/train/history.jsonl").read_text().splitlines()]
    assert [h["iteration"] for h in history] == list(range(1, ITERATIONS + 1))

    mlflow.set_tracking_uri(f"sqlite:///{work / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.stage = 'train'",
                              order_by=["attributes.start_time ASC"])
    killed, finished = runs.iloc[-2], runs.iloc[-1]
    assert killed["status"] == "FAILED" and killed["tags.cogrpo.ended"].startswith("process died")
    assert finished["status"] == "FINISHED" and finished["tags.resumed_from"] == killed["run_id"]
    resumed_at = int(finished["tags.resumed_at_iteration"])
    assert resumed_at % EVERY == 0 and resumed_at >= done_at_kill - EVERY  # lost ≤ one checkpoint interval


def test_a_second_training_on_the_same_folder_is_refused(trained_inputs):
    from cogrpo.errors import InputError
    from cogrpo.io import exclusive

    with exclusive(trained_inputs / "runs/train"):
        proc = _train_cmd(trained_inputs)
        assert proc.wait() == 2
        err = proc.stderr.read().strip().splitlines()[-1]
        assert err.startswith("error: runs/train: in use by another run (pid ")
    with exclusive(trained_inputs / "runs/train"), pytest.raises(InputError):
        with exclusive(trained_inputs / "runs/train"):
            pass
