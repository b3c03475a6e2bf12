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

from tests.tiny import TINY, run_stage

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS, EVERY = 12, 3


@pytest.fixture(scope="module")
def trained_inputs(tiny_project):
    """Prompts, tokenizer and base model of the tiny project, and a longer training run to interrupt."""
    for name in ("prompts", "tokenizer", "pretrain"):
        run_stage(name)
    params = TINY | {"train": TINY["train"] | {"iterations": ITERATIONS, "checkpoint_every": EVERY,
                                               "sample_every": 100}}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    return tiny_project


def _train_cmd(cwd: Path) -> subprocess.Popen:
    from prefect.settings import get_current_settings

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}  # each project its own store
    env |= {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")]),  # this checkout's library, also in a
            "PREFECT_API_URL": str(get_current_settings().api.url)}           # worktree of another one's environment
    return subprocess.Popen([sys.executable, "-m", "pipelines.stage", "train"], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _state_dir(cwd: Path) -> Path | None:
    """The training's own folder, runs/train/<identity>."""
    found = list((cwd / "runs/train").glob("train-*")) if (cwd / "runs/train").is_dir() else []
    return found[0] if len(found) == 1 else None


def _iterations_done(cwd: Path) -> int:
    state = _state_dir(cwd)
    history = state / "history.jsonl" if state else None
    return len(history.read_text().splitlines()) if history and history.is_file() else 0


@pytest.mark.slow  # suite time: resumption stays in the suite (tests/test_text.py, the 2-process train stage
# resuming checkpoints in tests/test_stages_e2e.py); `make bench` runs this kill -9
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
              "metrics/train_history.csv", "metrics/guards.csv"):
        assert (work / f).read_bytes() == (reference / f).read_bytes(), f
    history = [json.loads(x) for x in (_state_dir(work) / "history.jsonl").read_text().splitlines()]
    assert [h["iteration"] for h in history] == list(range(1, ITERATIONS + 1))

    mlflow.set_tracking_uri(f"sqlite:///{work / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.stage = 'train'",
                              order_by=["attributes.start_time ASC"])
    killed, finished = runs.iloc[-2], runs.iloc[-1]
    assert killed["status"] == "FAILED" and killed["tags.cogrpo.ended"].startswith("process died")
    assert finished["status"] == "FINISHED" and finished["tags.resumed_from"] == killed["run_id"]
    resumed_at = int(finished["tags.resumed_at_iteration"])
    assert resumed_at % EVERY == 0 and resumed_at >= done_at_kill - EVERY  # lost ≤ one checkpoint interval


@pytest.mark.slow  # suite time; the lock itself: tests/test_io.py
def test_a_second_training_on_the_same_folder_is_refused(trained_inputs):
    from cogrpo.errors import InputError
    from cogrpo.io import exclusive

    state = _state_dir(trained_inputs)
    shutil.rmtree(trained_inputs / "runs/store/train")  # so the run must train, not find its result
    with exclusive(state):
        proc = _train_cmd(trained_inputs)
        assert proc.wait() == 2
        err = proc.stderr.read().strip().splitlines()[-1]
        assert err.startswith(f"error: {state.relative_to(trained_inputs)}: in use by another run (pid ")
    with exclusive(state), pytest.raises(InputError):
        with exclusive(state):
            pass
    assert not (state / ".lock").exists()


def _set_iterations(work: Path, n: int) -> None:
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["train"]["iterations"] = n
    (work / "params.yaml").write_text(yaml.safe_dump(params))


def _history(work: Path) -> list[dict]:
    return [json.loads(x) for x in (_state_dir(work) / "history.jsonl").read_text().splitlines()]


@pytest.mark.slow  # suite time (the reward server's tests took its room)
def test_a_shorter_run_never_exports_the_longer_runs_model(trained_inputs):
    """After 12 iterations, `train.iterations: 5` trains 5 (its checkpoints at 9 and 12 are past its end) and
    replays exactly the longer run's first 5 iterations; the 12-iteration model is not relabelled."""
    work = trained_inputs
    long_history = _history(work)
    long_model = (work / "models/trained/model.safetensors").read_bytes()
    _set_iterations(work, 5)
    try:
        proc = _train_cmd(work)
        assert proc.wait() == 0, proc.stderr.read()
        assert json.loads((work / "models/trained/train.json").read_text())["iterations"] == 5
        assert (work / "models/trained/model.safetensors").read_bytes() != long_model
        assert _history(work) == long_history[:5]
    finally:
        _set_iterations(work, ITERATIONS)


@pytest.mark.slow  # keeps `make test` within 10 minutes on 2 cores; `make bench` runs it
def test_a_corrupt_checkpoint_falls_back_to_the_previous_good_one(trained_inputs, tmp_path):
    """NaN bytes written over the newest checkpoint's model (size unchanged): the longer rerun warns, resumes from
    the checkpoint before it, and ends where an uninterrupted run ends; no non-finite model is ever exported."""
    work = trained_inputs
    reference = tmp_path / "reference"
    reference.mkdir()
    for item in ("params.yaml", "data", "models"):
        src = work / item
        shutil.copytree(src, reference / item) if src.is_dir() else shutil.copy(src, reference / item)
    _set_iterations(work, ITERATIONS)
    assert _train_cmd(work).wait() == 0  # checkpoints at 9 and 12 (or finds the result)
    newest = sorted((_state_dir(work) / "checkpoints").iterdir())[-1]
    model = newest / "model/model.safetensors"
    data = bytearray(model.read_bytes())
    data[len(data) // 2: len(data) // 2 + 4096] = b"\xff" * 4096  # 0xffffffff is a NaN in float32
    model.write_bytes(bytes(data))
    longer = ITERATIONS + 2
    for w in (work, reference):
        _set_iterations(w, longer)
    try:
        resumed = _train_cmd(work)
        assert resumed.wait() == 0, resumed.stderr.read()
        assert f"skipping checkpoint {newest.relative_to(work)}" in resumed.stderr.read()
        uninterrupted = _train_cmd(reference)
        assert uninterrupted.wait() == 0
        for f in ("models/trained/model.safetensors", "models/trained/schedule.json"):
            assert (work / f).read_bytes() == (reference / f).read_bytes(), f
    finally:
        _set_iterations(work, ITERATIONS)


def _processes(has: bytes, *lacks: bytes) -> set[str]:
    """Live processes whose command line has the argument `has` and none of `lacks`, by pid."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if has in args and not any(a in args for a in lacks):
            found.add(proc.name)
    return found


def _our_servers() -> set[str]:
    """Temporary Prefect servers started by cogrpo's entry points (adapters/prefect_api.py), by pid."""
    return _processes(b"prefect.server.api.server:create_app", b"--app-dir")


def _two_iterations_in(work: Path, proc: subprocess.Popen, started: float, limit_s: float = 240) -> None:
    """Wait until the training `proc` runs has written two iterations since `started` (or ended, or limit_s):
    mid-training, whichever tests ran before (the state folder may not exist yet)."""
    end, base = time.monotonic() + limit_s, None
    while proc.poll() is None and time.monotonic() < end:
        history = _state_dir(work) / "history.jsonl" if _state_dir(work) else None
        if history and history.is_file() and history.stat().st_mtime > started:
            base = base or _iterations_done(work)
            if _iterations_done(work) >= base + 2:
                return
        time.sleep(0.05)


def _own_api_cmd(cwd: Path) -> subprocess.Popen:
    """The train stage as a terminal runs it: no Prefect API configured, in a process group of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen([sys.executable, "-m", "pipelines.stage", "train"], cwd=cwd, env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow  # keeps `make test` within 10 minutes on 2 cores; `make bench` runs it
def test_ctrl_c_stops_in_seconds_marks_the_run_killed_leaves_no_server_and_the_rerun_resumes(trained_inputs):
    """Ctrl-C in a terminal sends SIGINT to the whole foreground process group."""
    import mlflow

    work = trained_inputs
    _set_iterations(work, 60)
    servers = _our_servers()
    try:
        started = time.time()
        proc = _own_api_cmd(work)
        _two_iterations_in(work, proc, started)
        assert proc.poll() is None, proc.stderr.read()
        os.killpg(proc.pid, signal.SIGINT)
        start = time.monotonic()
        code = proc.wait(timeout=60)
        stopped_at = _iterations_done(work)  # its last checkpoint is at most EVERY before
        seconds = time.monotonic() - start
        err = proc.stderr.read().strip().splitlines()
        assert code == 130, "\n".join(err[-30:])
        assert seconds < 15
        assert err[-1].startswith("interrupted: the run is marked KILLED") and "Traceback" not in "\n".join(err)
        assert any("Finished in state Crashed" in line for line in err)  # the Prefect run, not left RUNNING
        time.sleep(2)
        assert _our_servers() == servers  # the temporary server went with it
        mlflow.set_tracking_uri(f"sqlite:///{work / 'mlflow.db'}")
        runs = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.stage = 'train'",
                                  order_by=["attributes.start_time DESC"])
        assert runs.iloc[0]["status"] == "KILLED"
        resumed = _train_cmd(work)
        assert resumed.wait() == 0, resumed.stderr.read()
        runs = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.stage = 'train'",
                                  order_by=["attributes.start_time DESC"])
        assert int(runs.iloc[0]["tags.resumed_at_iteration"]) >= stopped_at - EVERY and runs.iloc[0]["status"] == "FINISHED"
    finally:
        _set_iterations(work, ITERATIONS)


@pytest.mark.slow  # suite time; the kill -9 resume test stays
def test_kill_9_leaves_no_temporary_server_behind(trained_inputs):
    work = trained_inputs
    _set_iterations(work, 200)
    servers = _our_servers()
    try:
        proc = _own_api_cmd(work)
        end = time.monotonic() + 180
        while _our_servers() == servers and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.1)
        assert _our_servers() != servers, proc.stderr.read() if proc.poll() is not None else "no server started"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        end = time.monotonic() + 20
        while _our_servers() != servers and time.monotonic() < end:
            time.sleep(0.2)
        assert _our_servers() == servers
    finally:
        _set_iterations(work, ITERATIONS)


def _training_ranks() -> set[str]:
    """Live processes of a multi-process training (its ranks), by pid."""
    return _processes(b"pipelines.train_ranks")


@pytest.mark.slow  # two ranks and a rerun: ~1 minute; `make bench` runs it
def test_ctrl_c_stops_every_rank_in_seconds_and_the_rerun_resumes(trained_inputs):
    """train.processes 2: the terminal's SIGINT reaches the launcher only (torchrun has a session of its own); the
    launcher stops torchrun's whole group, so no rank trains on, and the rerun resumes from the last checkpoint."""
    import mlflow

    work = trained_inputs
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["train"] |= {"processes": 2, "iterations": 10_000}  # never reached: the signal ends it
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    try:
        started = time.time()
        proc = _own_api_cmd(work)
        _two_iterations_in(work, proc, started)
        assert proc.poll() is None and _training_ranks(), proc.stderr.read() if proc.poll() is not None else ""
        os.killpg(proc.pid, signal.SIGINT)
        start = time.monotonic()
        code = proc.wait(timeout=60)
        seconds = time.monotonic() - start
        err = proc.stderr.read().strip().splitlines()
        assert code == 130, "\n".join(err[-30:])
        assert seconds < 15 and not _training_ranks()
        assert err[-1].startswith("interrupted: the run is marked KILLED") and "Traceback" not in "\n".join(err)
        stopped_at = _iterations_done(work)
        time.sleep(3)
        assert _iterations_done(work) == stopped_at  # nothing trained on after the signal
        _set_iterations(work, stopped_at + 2)
        resumed = _train_cmd(work)
        assert resumed.wait() == 0, resumed.stderr.read()
        mlflow.set_tracking_uri(f"sqlite:///{work / 'mlflow.db'}")
        runs = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.stage = 'train'",
                                  order_by=["attributes.start_time DESC"])
        assert runs.iloc[0]["status"] == "FINISHED" and runs.iloc[1]["status"] == "KILLED"
        assert int(runs.iloc[0]["tags.resumed_at_iteration"]) >= stopped_at - EVERY  # its last checkpoint kept
    finally:
        params["train"] |= {"processes": 1, "iterations": ITERATIONS}
        (work / "params.yaml").write_text(yaml.safe_dump(params))
