"""MLflow helpers: a local sqlite store in the repo, runs addressed by id (MLflow's active run is per thread)."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

EXPERIMENT = "cogrpo"


def setup(root: str | Path = ".") -> str:
    """Point MLflow at <root>/mlflow.db with artifacts under <root>/mlartifacts; return the experiment id."""
    root = Path(root).resolve()
    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    if mlflow.get_experiment_by_name(EXPERIMENT) is None:
        mlflow.create_experiment(EXPERIMENT, artifact_location=(root / "mlartifacts").as_uri())
    return mlflow.set_experiment(EXPERIMENT).experiment_id


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= flatten(v, key + ".")
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                out |= flatten(x, f"{key}.{i}.")
        else:
            out[key] = v
    return out


def log_metrics(run_id: str, metrics: dict, step: int | None = None, prefix: str = "") -> None:
    client = MlflowClient()
    for k, v in flatten(metrics, prefix).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            client.log_metric(run_id, k, float(v), step=step or 0)


def log_image(run_id: str, image, name: str) -> None:
    MlflowClient().log_image(run_id, image, artifact_file=name)


def log_artifacts(run_id: str, folder: str | Path, artifact_path: str) -> None:
    MlflowClient().log_artifacts(run_id, str(folder), artifact_path)
