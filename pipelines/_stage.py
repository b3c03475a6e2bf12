"""What every DVC stage entry point shares: validate params.yaml first, run in an MLflow run, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

for _k, _v in {"HF_HUB_OFFLINE": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "MLFLOW_DISABLE_TELEMETRY": "true", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_k, _v)

import mlflow  # noqa: E402

from cogrpo.config import Params, load_params  # noqa: E402
from cogrpo.errors import InputError  # noqa: E402
from tasks import tracking  # noqa: E402

PARAMS_FILE = "params.yaml"


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_stage(name: str, sections: list[str], body: Callable[[Params, str], dict]) -> dict:
    """Validate params, open an MLflow run logging the stage's params sections, run body(params, run_id),
    log the numbers it returns. Bad input exits with status 2 and one line naming the file or key."""
    try:
        params = load_params(PARAMS_FILE)
        tracking.setup()
        with mlflow.start_run(run_name=name, tags={"stage": name, "git_commit": git_commit()}) as run:
            dumped = params.model_dump()
            mlflow.log_params(tracking.flatten({s: dumped[s] for s in sections}))
            result = body(params, run.info.run_id)
            tracking.log_metrics(run.info.run_id, result)
        return result
    except (InputError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
