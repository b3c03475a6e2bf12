"""Bad input through the real stage entry points (DVC's commands, which run the Prefect flows): exit status
2, the last line of stderr names the file, key or line, and no output is half-written."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tests.tiny import TINY, run_stage


def _fails(stage: str, capsys) -> str:
    with pytest.raises(SystemExit) as err:
        run_stage(stage)
    assert err.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def _snapshot(folder: str) -> dict[str, bytes]:
    root = Path(folder)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def restore(built_project):
    """Put back whatever a test breaks."""
    saved = {p: Path(p).read_bytes() for p in ("params.yaml",)}
    keep = Path("../kept")
    shutil.rmtree(keep, ignore_errors=True)
    for d in ("data", "models"):
        shutil.copytree(d, keep / d)
    yield
    for p, data in saved.items():
        Path(p).write_bytes(data)
    for d in ("data", "models"):
        shutil.rmtree(d)
        shutil.copytree(keep / d, d)


def _params(**changes) -> None:
    Path("params.yaml").write_text(yaml.safe_dump(TINY | changes))


def test_malformed_params_name_the_line(restore, capsys):
    Path("params.yaml").write_text("world:\n  grid: 4\n eval: [\n")
    assert _fails("baseline", capsys).startswith("error: params.yaml: line 3 malformed YAML")


def test_unknown_reward_names_the_key_before_any_work(restore, capsys):
    before = _snapshot("runs/train")
    _params(train=TINY["train"] | {"rewards": [{"name": "imagereward_typo"}]})
    assert _fails("train", capsys) == ("error: params.yaml: key 'train.rewards.0.name': unknown reward "
                                     "'imagereward_typo' (known: clip, colour_match, colour_novelty, compositional, hpsv2, imagereward, strict)")
    assert _snapshot("runs/train") == before


@pytest.mark.parametrize("content, message", [
    (b"PAR1 this is not parquet", "not a readable parquet file (ComputeError)"),
    (None, "the prompt file is empty"),
])
def test_bad_prompt_file_names_the_file_and_writes_nothing(restore, capsys, content, message):
    import polars as pl

    before = _snapshot("outputs/baseline")
    path = Path("data/prompts/eval_heldout.parquet")
    if content is None:
        pl.read_parquet(path).head(0).write_parquet(path)
    else:
        path.write_bytes(content)
    assert _fails("baseline", capsys) == f"error: {path}: {message}"
    assert _snapshot("outputs/baseline") == before
    assert not list(Path("outputs").glob(".*tmp*"))


def test_a_prompt_row_the_world_cannot_hold_names_the_file_and_row(restore, capsys):
    from cogrpo.io import read_specs, write_specs

    path = Path("data/prompts/eval_heldout.parquet")
    specs = read_specs(path)
    specs[1]["include"][0]["count"] = 99  # on a 16-cell board: was evaluated silently before
    write_specs(path, specs)
    before = _snapshot("outputs/baseline")
    assert _fails("baseline", capsys).startswith(f"error: {path}:row 1: include[0].count: 99 can never be met")
    assert _snapshot("outputs/baseline") == before


def test_checkpoint_that_does_not_match_its_model_config(restore, capsys):
    config = Path("models/trained/config.json")
    cfg = json.loads(config.read_text())
    config.write_text(json.dumps(cfg | {"dim": cfg["dim"] * 2}))
    before = _snapshot("outputs/eval")
    assert _fails("evaluate", capsys).startswith("error: models/trained/model.safetensors: tensor ")
    assert _snapshot("outputs/eval") == before


def test_missing_input_is_named(restore, capsys):
    shutil.rmtree("models/tokenizer")
    before = _snapshot("outputs/eval")
    line = _fails("evaluate", capsys)
    assert line == "error: models/tokenizer: input of stage 'evaluate' not found (run `dvc repro evaluate`)"
    assert _snapshot("outputs/eval") == before


@pytest.mark.parametrize("change, message", [
    ({"world": {"colors": ["red", "magenta"]}}, "key 'world.colors': unknown name 'magenta' (known: red, green,"),
    ({"world": {"shapes": ["circle", "circle"]}}, "key 'world.shapes': names repeat"),
    ({"train": {"rewards": []}}, "key 'train.rewards': List should have at least 1 item"),
    ({"train": {"rewards": [{"name": "compositional", "weight": float("nan")}]}}, "key 'train.rewards.0.weight': Input "
     "should be a finite number"),
    ({"train": {"rewards": [{"name": "compositional", "weight": -1.0}]}}, "key 'train.rewards.0.weight': Input should "
     "be greater than or equal to 0"),
    ({"train": {"rewards": [{"name": "compositional", "weight": 0.0}]}}, "key 'train': every reward weight is 0"),
    ({"train": {"lr_model": float("inf")}}, "key 'train.lr_model': Input should be a finite number"),
    ({"train": {"kl_beta": float("inf")}}, "key 'train.kl_beta': Input should be a finite number"),
    ({"train": {"iterations": True}}, "key 'train.iterations': expected a number, got true"),
    ({"train": {"prompts_per_iter": 2000}}, "key 'train.prompts_per_iter': 2000 exceeds the at most"),
])
def test_bad_params_fail_at_load_with_one_line_and_touch_nothing(restore, capsys, change, message):
    """Cross-checks fail before anything runs: no Prefect flow, no MLflow run, no file touched."""
    section = next(iter(change))
    _params(**{section: TINY.get(section, {}) | change[section]})
    before = {d: _snapshot(d) for d in ("runs", "models", "metrics")}
    assert f"error: params.yaml: {message}" in _fails("train", capsys)
    assert {d: _snapshot(d) for d in ("runs", "models", "metrics")} == before


@pytest.mark.slow  # keeps `make test` within 10 minutes on 2 cores; `make bench` runs it
def test_dvc_repro_with_bad_params_keeps_every_output(tmp_path):
    """DVC removes a stage's outputs before running its command unless they persist: a bad params.yaml must
    leave data/prompts and the git-tracked metrics in place."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    work = tmp_path / "repo"
    work.mkdir()
    for f in ("dvc.yaml", "prefect.toml"):
        shutil.copy(root / f, work / f)
    from cogrpo.config import parse_params

    full = parse_params(TINY).model_dump(mode="json")  # DVC wants every section it tracks present
    (work / "params.yaml").write_text(yaml.safe_dump(full))
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL")}
    env["PYTHONPATH"] = str(work / "src")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    run = lambda *cmd: subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)  # noqa: E731
    assert run("git", "init", "-q").returncode == 0
    assert run("dvc", "init", "-q").returncode == 0
    for folder in ("src", "tasks", "flows", "pipelines", "adapters"):  # the project's code, which dvc.yaml names
        shutil.copytree(root / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    first = run("dvc", "repro", "tokenizer")  # prompts, then tokenizer
    assert first.returncode == 0, first.stderr[-2000:]
    import mlflow  # the stage runs of one `dvc repro` are grouped under one parent run

    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{work / 'mlflow.db'}")
    try:
        df = mlflow.search_runs(experiment_names=["cogrpo"])
    finally:
        mlflow.set_tracking_uri(before)
    (group,) = df[df["tags.mlflow.runName"] == "dvc repro"]["run_id"]
    kids = df[df["tags.mlflow.parentRunId"] == group]
    assert sorted(kids["tags.stage"]) == ["prompts", "tokenizer"] and set(df["status"]) == {"FINISHED"}
    before = {d: _snapshot(work / d) for d in ("data", "metrics")}
    assert before["data"] and before["metrics"]
    (work / "params.yaml").write_text(yaml.safe_dump(full | {"prompts": full["prompts"] | {"dpg_train": "many"}}))
    bad = run("dvc", "repro", "-s", "prompts")
    assert bad.returncode != 0 and "key 'prompts.dpg_train'" in bad.stderr
    assert {d: _snapshot(work / d) for d in ("data", "metrics")} == before
