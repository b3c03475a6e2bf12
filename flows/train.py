"""Flow of the Co-GRPO training stage: iterations of rollout → score → update, checkpointed and resumable."""

from __future__ import annotations

from prefect import flow

from cogrpo.config import Params
from tasks.train import train_model


@flow(name="co-grpo-train")
def train(params: Params, run_dir: str = "runs/train", out_dir: str = "models/trained",
          base_model_dir: str = "models/base", tokenizer_dir: str = "models/tokenizer",
          prompts_file: str = "data/prompts/train.parquet",
          mlflow_run_id: str | None = None) -> str:
    """Train from the base model, or resume from <run_dir>/checkpoint; export model + schedule to out_dir."""
    return train_model(params, run_dir, out_dir, base_model_dir, tokenizer_dir, prompts_file, mlflow_run_id)
