"""Flow of the Co-GRPO training stage: iterations of rollout → score → update, checkpointed and resumable."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from tqdm.auto import tqdm

from cogrpo.config import Params
from tasks.train import (co_update, export_result, grouped_rollout, log_samples, open_session, save_checkpoint,
                         score_rewards)


@flow(name="co-grpo-train")
def train(params: Params, run_dir: str = "runs/train", out_dir: str = "models/trained",
          base_model_dir: str = "models/base", tokenizer_dir: str = "models/tokenizer",
          prompts_file: str = "data/prompts/train.parquet",
          mlflow_run_id: str | None = None) -> str:
    """Train from the base model, or resume from <run_dir>/checkpoint; export model + schedule to out_dir."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    cfg = params.train
    start = open_session(params, run_dir, base_model_dir, tokenizer_dir, prompts_file)
    for it in tqdm(range(start, cfg.iterations), desc=f"co-grpo [{cfg.mode}]", initial=start, total=cfg.iterations):
        rollout = grouped_rollout(run_dir)
        rewards = score_rewards(params, run_dir, rollout)
        co_update(run_dir, rollout, rewards, mlflow_run_id)
        if mlflow_run_id and (it + 1) % cfg.sample_every == 0:
            log_samples(run_dir, mlflow_run_id)
        if (it + 1) % cfg.checkpoint_every == 0 or it + 1 == cfg.iterations:
            save_checkpoint(params, run_dir, base_model_dir)
    return export_result(run_dir, out_dir)
