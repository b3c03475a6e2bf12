"""Task of the pretraining stage: masked-token pretraining of the MDM."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from cogrpo.config import Params
from cogrpo.io import atomic_dir, read_specs
from cogrpo.pretrain import build_model, make_pool, pretrain
from cogrpo.prompts import HeldOut
from cogrpo.scenes import World
from cogrpo.text import TextEncoder
from cogrpo.tokenizer import Tokenizer
from tasks import tracking


@task
def pretrain_model(params: Params, prompts_dir: str, tokenizer_dir: str, out_dir: str, run_id: str | None) -> list[dict]:
    """Pretrain on training prompts with scenes that avoid held-out colour–shape pairs; save to out_dir."""
    world, cfg = World(params.world), params.pretrain
    specs = read_specs(Path(prompts_dir) / "train.parquet")
    held = HeldOut.from_json((Path(prompts_dir) / "heldout.json").read_text())
    tokenizer = Tokenizer.load(tokenizer_dir)
    text = TextEncoder(params.model.text_encoder, params.model.max_text_tokens)
    states = text.encode([s["prompt"] for s in specs])
    pool = make_pool(world, tokenizer, specs, cfg.pool_size, cfg.seed, held.allows_pair, progress=True)
    model = build_model(params.model, tokenizer, text, cfg.seed)

    def on_log(step: int, record: dict) -> None:
        if run_id:
            tracking.log_metrics(run_id, {"loss": record["loss"], "lr": record["lr"]}, step=step)

    history = pretrain(model, states, pool, cfg, on_log=on_log)
    with atomic_dir(out_dir) as tmp:
        model.save(tmp)
    return history
