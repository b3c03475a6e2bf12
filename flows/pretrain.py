"""Flow of the pretraining stage."""

from __future__ import annotations

from prefect import flow

from cogrpo.config import Params
from tasks.pretrain import pretrain_model


@flow(name="pretrain")
def pretrain(params: Params, prompts_dir: str = "data/prompts", tokenizer_dir: str = "models/tokenizer",
             out_dir: str = "models/base", run_id: str | None = None) -> list[dict]:
    """Masked-token pretraining; returns the loss history."""
    return pretrain_model(params, prompts_dir, tokenizer_dir, out_dir, run_id)
