"""Bad input through the real stage entry points (DVC's commands, which run the Prefect flows): exit status
2, the last line of stderr names the file, key or line, and no output is half-written."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.tiny import TINY


@pytest.fixture(scope="module")
def built(tiny_project):
    from pipelines import baseline, pretrain, prompts, tokenizer, train

    for stage in (prompts, tokenizer, pretrain, baseline, train):
        stage.main()
    return tiny_project


def _fails(stage, capsys) -> str:
    with pytest.raises(SystemExit) as err:
        stage.main()
    assert err.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def _snapshot(folder: str) -> dict[str, bytes]:
    root = Path(folder)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def restore(built):
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
    from pipelines import baseline

    Path("params.yaml").write_text("world:\n  grid: 4\n eval: [\n")
    assert _fails(baseline, capsys).startswith("error: params.yaml: line 3 malformed YAML")


def test_unknown_reward_names_the_key_before_any_work(restore, capsys):
    from pipelines import train

    before = _snapshot("runs/train")
    _params(train=TINY["train"] | {"rewards": [{"name": "imagereward_typo"}]})
    assert _fails(train, capsys) == ("error: params.yaml: key 'train.rewards.0.name': unknown reward "
                                     "'imagereward_typo' (known: compositional, strict)")
    assert _snapshot("runs/train") == before


@pytest.mark.parametrize("content, message", [
    (b"PAR1 this is not parquet", "not a readable parquet file (ComputeError)"),
    (None, "the prompt file is empty"),
])
def test_bad_prompt_file_names_the_file_and_writes_nothing(restore, capsys, content, message):
    import polars as pl

    from pipelines import baseline

    before = _snapshot("outputs/baseline")
    path = Path("data/prompts/eval_heldout.parquet")
    if content is None:
        pl.read_parquet(path).head(0).write_parquet(path)
    else:
        path.write_bytes(content)
    assert _fails(baseline, capsys) == f"error: {path}: {message}"
    assert _snapshot("outputs/baseline") == before
    assert not list(Path("outputs").glob(".*tmp*"))


def test_checkpoint_that_does_not_match_its_model_config(restore, capsys):
    from pipelines import evaluate

    config = Path("models/trained/config.json")
    cfg = json.loads(config.read_text())
    config.write_text(json.dumps(cfg | {"dim": cfg["dim"] * 2}))
    assert _fails(evaluate, capsys).startswith("error: models/trained/model.safetensors: tensor ")
    assert not Path("outputs/eval").exists()


def test_missing_input_is_named(restore, capsys):
    from pipelines import evaluate

    shutil.rmtree("models/tokenizer")
    line = _fails(evaluate, capsys)
    assert line == "error: models/tokenizer/tokenizer.json: missing tokenizer file (run the tokenizer stage)"
    assert not Path("outputs/eval").exists()
