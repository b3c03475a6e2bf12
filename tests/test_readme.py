"""The README's commands run as written: every command of its ```bash blocks, in order, in a small project with
the environment activated as the README says (`source .venv/bin/activate`: the venv's bin first on PATH).

Left out, each for a reason: installing and the full-size run (`make`: CI runs `make test`), servers that run
until stopped (`prefect server start`, `pipelines.serve`, `mlflow ui`: tests/test_deployment.py serves and
triggers the deployments), background queue workers, and the hours-long benchmarks. About 8 minutes: slow.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.tiny import TINY

ROOT = Path(__file__).resolve().parents[1]
LEFT_OUT = ("make ", "prefect server start", "export PREFECT_API_URL", "python -m pipelines.serve",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow ui",
            "MLFLOW_TRACKING_URI=sqlite:///$PWD/mlflow.db dvc queue start", "python bench/")


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            command = re.sub(r"\s+#\s.*$", "", line).strip()  # a trailing comment
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def test_the_readme_has_commands_and_each_left_out_one_is_named():
    commands = readme_commands()
    assert len(commands) > 15
    assert all(any(c.startswith(p) for c in commands) for p in LEFT_OUT)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_readme_command_runs_as_written(tmp_path):
    from cogrpo.config import parse_params

    work = tmp_path / "project"
    for folder in ("src", "tasks", "flows", "pipelines", "adapters"):
        shutil.copytree(ROOT / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for f in ("dvc.yaml", "prefect.toml", ".gitignore", ".dvcignore"):
        shutil.copy(ROOT / f, work / f)
    (work / "params.yaml").write_text(yaml.safe_dump(parse_params(TINY).model_dump(mode="json")))
    venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_TRACKING", "PYTEST"))}
    env |= {"PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv_bin.parent)}
    env.pop("PYTHONPATH", None)

    def sh(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=600)

    for setup in ("git init -q && git config user.email t@t && git config user.name t",
                  "dvc init -q && dvc config core.analytics false", "dvc repro", "git add -A && git commit -qm base"):
        done = sh(setup)
        assert done.returncode == 0, f"{setup}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
    ran = []
    for command in readme_commands():
        if command.startswith(LEFT_OUT):
            continue
        done = sh(command)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        ran.append(command)
    assert any(c.startswith("dvc exp run -S") for c in ran) and any("pipelines.compare" in c for c in ran)
