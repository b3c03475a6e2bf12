"""The train stage in several processes (train.processes: 2, torchrun with gloo), through its real entry point:
what 1 process trains, checkpoints that resume under either process count, a rank killed mid-run, a launcher
killed outright."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.tiny import TINY, run_stage

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("runs/store/train", "runs/train", "models/trained")  # what a training run changes


@pytest.fixture
def kept(built_project, tmp_path):
    """The built project's training put back afterwards, byte for byte."""
    for folder in FOLDERS:
        shutil.copytree(folder, tmp_path / "kept" / folder)
    yield tmp_path / "kept"
    Path("params.yaml").write_text(yaml.safe_dump(TINY))
    _put_back(tmp_path / "kept")


def _put_back(kept: Path) -> None:
    """The built project's training as `kept` holds it."""
    for folder in FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(kept / folder, folder)


def _params(processes: int, **train) -> None:
    Path("params.yaml").write_text(yaml.safe_dump(TINY | {"train": TINY["train"] | {"processes": processes} | train}))


def _state() -> Path:
    (state,) = Path("runs/train").iterdir()  # one folder for every process count (train.processes is not identity)
    return state


def _trained() -> dict[str, torch.Tensor]:
    model = load_file("models/trained/model.safetensors")
    knobs = json.loads(Path("models/trained/schedule.json").read_text())["schedule"]
    return model | {f"schedule.{t}.{k}": torch.tensor(v) for t, row in enumerate(knobs) for k, v in row.items()}


def _train(processes: int, keep: list[str]) -> dict[str, torch.Tensor]:
    """The train stage from the checkpoints named in keep (none: from scratch)."""
    for ckpt in (_state() / "checkpoints").iterdir():
        if ckpt.name not in keep:
            shutil.rmtree(ckpt)
    shutil.rmtree("runs/store/train")  # the result is in the store: compute it again
    _params(processes)
    run_stage("train")
    return _trained()


@pytest.mark.slow  # suite time: the killed-rank test below ends where 1 process ends, with 2 processes' iterations in it
def test_two_processes_train_what_one_does_and_a_checkpoint_resumes_under_another_count(kept):
    """2 processes from scratch = 1 process (model and schedule within 1e-5), and the iteration-2 checkpoint written
    by 2 processes resumed by 1 ends there too. (2 processes resuming 1's checkpoint: the killed-rank test below.)"""
    one = _trained()  # the built project's 1-process training (iterations 3, checkpoints 2 and 3)
    runs = {"2 from scratch": lambda: _train(2, []),
            "1 from 2's iteration 2": lambda: _train(1, ["000002"])}
    for name, run in runs.items():
        again = run()
        assert again.keys() == one.keys()
        worst = max((again[k].float() - one[k].float()).abs().max().item() for k in one)
        assert worst <= 1e-5, (name, worst)
    assert (_state() / "processes.log").is_file() and (_state() / "processes_result.json").is_file()


@contextlib.contextmanager
def _stage_process() -> Iterator[subprocess.Popen]:
    """`python -m pipelines.stage train` in the background; killed with its processes if the test fails first."""
    from prefect.settings import get_current_settings

    env = os.environ | {"PYTHONPATH": str(ROOT), "PREFECT_API_URL": str(get_current_settings().api.url)}
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.stage", "train"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait()


def _ranks(launcher: psutil.Process) -> dict[int, psutil.Process]:
    """The training processes under a launcher, by rank."""
    found = {}
    for p in launcher.children(recursive=True):
        try:
            if "pipelines.train_ranks" in " ".join(p.cmdline()):
                found[int(p.environ()["RANK"])] = p
        except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError):
            pass
    return found


def _wait_for(condition, what: str, timeout: float = 120.0):
    end = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def _iterations_logged() -> int:
    history = _state() / "history.jsonl"
    return len(history.read_text().splitlines()) if history.is_file() else 0


def test_a_killed_rank_ends_the_run_with_one_line_a_killed_launcher_leaves_no_rank_and_the_rerun_resumes(kept):
    import mlflow

    iterations = 12  # the rank is killed after 3 more than the built project's 3: room to spare, and a short rerun
    _params(2, iterations=iterations, checkpoint_every=2)
    shutil.rmtree("runs/store/train")
    start = _iterations_logged()  # 3: the built project's run, resumed from its last checkpoint

    # one rank killed: torchrun stops the other, the stage ends with one line naming the log
    with _stage_process() as stage:
        ranks = _wait_for(lambda: len(r := _ranks(psutil.Process(stage.pid))) == 2 and r, "two ranks")
        _wait_for(lambda: _iterations_logged() >= start + 3, "a few iterations")
        ranks[1].kill()
        _, err = stage.communicate(timeout=120)
    last = err.strip().splitlines()[-1]
    assert stage.returncode == 2 and last.startswith("error: train: a training process failed"), err[-2000:]
    assert "processes.log" in last and "rerun to resume" in last
    assert not ranks[0].is_running() or ranks[0].status() == psutil.STATUS_ZOMBIE
    done = _iterations_logged()
    assert done < iterations

    # the launcher killed outright: the kernel ends torchrun, torchrun its ranks
    with _stage_process() as stage:
        ranks = _wait_for(lambda: len(r := _ranks(psutil.Process(stage.pid))) == 2 and r, "two ranks")
        stage.kill()
        stage.wait()
    gone, alive = psutil.wait_procs(list(ranks.values()), timeout=60)
    assert not alive, f"ranks outlived their launcher: {[p.pid for p in alive]}"

    # the rerun (any process count) resumes from the last checkpoint and finishes
    checkpoints = sorted(p.name for p in (_state() / "checkpoints").iterdir())
    _params(1, iterations=iterations, checkpoint_every=2)
    run_stage("train")
    history = [json.loads(line)["iteration"] for line in (_state() / "history.jsonl").read_text().splitlines()]
    assert history == list(range(1, iterations + 1))
    runs = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.stage = 'train'",
                              order_by=["attributes.start_time DESC"])
    assert int(runs.iloc[0]["tags.resumed_at_iteration"]) == int(checkpoints[-1]) >= max(done - 2, start + 1)

    # and it ends where 1 process alone ends from the built project's checkpoint (model and schedule within 1e-5):
    # the iterations 2 processes trained, and the resume of their checkpoint by 1, changed nothing but rounding
    resumed = _trained()
    _put_back(kept)
    shutil.rmtree("runs/store/train")
    run_stage("train")
    alone = _trained()
    assert alone.keys() == resumed.keys()
    worst = max((alone[k].float() - resumed[k].float()).abs().max().item() for k in alone)
    assert worst <= 1e-5, worst
