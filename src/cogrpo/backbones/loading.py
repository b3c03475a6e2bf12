"""The generator a stage works with, from the model params and the stage's input folders.

A model folder (the pretrain stage's `models/base`, the train stage's `models/trained`, a checkpoint's `model/`)
holds what `Generator.save_trained` wrote: for the embedded MDM the whole model; for aMUSEd and Meissonic the trained
adapters (or transformer) on top of `model.pretrained`, or, for the base model, only `generator.json` naming the
snapshot.
"""

from __future__ import annotations

import json
from pathlib import Path

from cogrpo.config import ModelConfig, WorldConfig
from cogrpo.core.generator import Generator
from cogrpo.io import content_hash

POINTER = "generator.json"


def load_generator(cfg: ModelConfig, inputs: dict[str, Path], world: WorldConfig | None = None) -> Generator:
    """embedded: the MDM in inputs["model"], decoding through inputs["tokenizer"] (with `world`, as the stages
    pass it, refused where they were made for another board). amused, meissonic: model.pretrained, with the
    trained weights in inputs["model"] when there is one and it holds any."""
    gen = _load(cfg, inputs, world)
    gen.compile_sampling = cfg.compile
    return gen


def _load(cfg: ModelConfig, inputs: dict[str, Path], world: WorldConfig | None) -> Generator:
    if cfg.backbone == "embedded":
        from cogrpo.backbones.embedded import EmbeddedGenerator

        return EmbeddedGenerator.load(inputs["model"], inputs["tokenizer"], world)
    from cogrpo.backbones.snapshot import has_trained_weights, snapshot_folder

    if cfg.backbone == "meissonic":
        from cogrpo.backbones.meissonic import MeissonicGenerator as Pretrained
    else:
        from cogrpo.backbones.amused import AmusedGenerator as Pretrained
    gen = Pretrained(snapshot_folder(cfg.pretrained, cfg.backbone), cfg)
    if "model" in inputs and has_trained_weights(Path(inputs["model"])):
        gen.load_trained(Path(inputs["model"]))
    return gen


def write_pretrained_pointer(cfg: ModelConfig, out: Path) -> dict:
    """The base model of a pretrained backbone, as a pointer: the snapshot it names and the sha256 of its content,
    so that DVC and the store see new weights as a new base model (the weights stay where they are)."""
    from cogrpo.backbones.snapshot import snapshot_folder

    folder = snapshot_folder(cfg.pretrained, cfg.backbone)
    record = {"backbone": cfg.backbone, "pretrained": cfg.pretrained, "sha256": content_hash(folder)}
    out.mkdir(parents=True, exist_ok=True)
    (out / POINTER).write_text(json.dumps(record, indent=1) + "\n")
    return record
