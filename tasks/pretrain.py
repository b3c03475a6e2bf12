"""The pretraining stage's work: masked-token pretraining of the embedded MDM."""

from __future__ import annotations

from pathlib import Path

import torch

from cogrpo.backbones.loading import write_pretrained_pointer
from cogrpo.backbones.pretrain import ScenePool, build_model, make_pool, pretrain
from cogrpo.backbones.text import TextEncoder
from cogrpo.config import Params
from cogrpo.io import read_specs
from cogrpo.world.prompts import HeldOut
from cogrpo.world.scenes import World
from cogrpo.world.tokenizer import Tokenizer
from tasks.context import StageContext


def pretraining_data(params: Params, prompts: Path, tokenizer: Tokenizer,
                     text: TextEncoder) -> tuple[ScenePool, tuple[torch.Tensor, torch.Tensor]]:
    """What the MDM is pretrained on: pretrain.pool_size scenes of the training prompts that avoid held-out
    colour–shape pairs, and every training prompt's text states (train.anchor_coef reuses them)."""
    specs = read_specs(prompts / "train.parquet")
    held = HeldOut.from_json((prompts / "heldout.json").read_text())
    cfg = params.pretrain
    pool = make_pool(World(params.world), tokenizer, specs, cfg.pool_size, cfg.seed, held.allows_pair)
    return pool, text.encode([s["prompt"] for s in specs])


def pretrain_model(params: Params, inputs: dict[str, Path], out: Path, ctx: StageContext) -> dict:
    """Pretrain on training prompts with scenes that avoid held-out colour–shape pairs; the model → out.
    Returns the final loss and the loss curve (wall-clock time goes to the progress report only: the result
    must be the same bytes on every run). A pretrained backbone (aMUSEd) is not pretrained here: its base model
    is a pointer to model.pretrained with the sha256 of the weights."""
    if params.model.backbone != "embedded":
        return {"final_loss": None, "steps": 0, "history": [], "pretrained": write_pretrained_pointer(params.model, out)}
    torch.set_num_threads(params.threads)
    cfg = params.pretrain
    tokenizer = Tokenizer.load(inputs["tokenizer"])
    text = TextEncoder(params.model.text_encoder, params.model.max_text_tokens)
    pool, states = pretraining_data(params, inputs["prompts"], tokenizer, text)
    model = build_model(params.model, tokenizer, text, cfg.seed)

    def on_log(step: int, record: dict) -> None:
        ctx.report("pretraining", step, cfg.steps, loss=record["loss"], lr=record["lr"], minutes=record["minutes"])

    history = [{k: h[k] for k in ("step", "loss", "lr")}
               for h in pretrain(model, states, pool, cfg, on_log=on_log, progress=False)]
    model.save(out)
    return {"final_loss": history[-1]["loss"], "steps": history[-1]["step"], "history": history}
