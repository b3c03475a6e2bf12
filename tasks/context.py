"""What a stage's work receives besides its params, inputs and output folder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def _silent(label: str, done: int, total: int, **metrics: float) -> None:
    pass


@dataclass
class StageContext:
    # report(label, done, total, **metrics): progress of long work (the orchestration shows it in the UIs)
    report: Callable[..., None] = _silent
    # a folder owned by this stage's identity that survives a crash (a training's checkpoints); None if unneeded
    state_dir: Path | None = None
    # the MLflow run the stage logs into, if any
    mlflow_run_id: str | None = None
