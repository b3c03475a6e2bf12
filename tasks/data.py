"""The data stages' work: prompt sets and the VQ tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from cogrpo.config import Params
from cogrpo.images import image_grid
from cogrpo.io import read_specs, write_specs
from cogrpo.world.checker import Checker
from cogrpo.world.prompts import HeldOut, make_prompt_sets, split_report
from cogrpo.world.scenes import World
from cogrpo.world.tokenizer import fit_tokenizer, roundtrip_pass_rate
from tasks.context import StageContext

PROMPT_SETS = ("train", "eval_heldout", "eval_seen")


def write_prompt_sets(params: Params, inputs: dict[str, Path], out: Path, ctx: StageContext) -> dict:
    """<out>/{train,eval_heldout,eval_seen}.parquet and heldout.json; returns the split report."""
    sets, held = make_prompt_sets(World(params.world), params.prompts)
    for name in PROMPT_SETS:
        write_specs(out / f"{name}.parquet", sets[name])
    (out / "heldout.json").write_text(held.to_json())
    return split_report(sets, held)


def train_tokenizer(params: Params, inputs: dict[str, Path], out: Path, ctx: StageContext) -> dict:
    """Fit the codebooks on noisy random scenes (held-out colour–shape pairs excluded); measure the round trip."""
    world, cfg, prompts = World(params.world), params.tokenizer, inputs["prompts"]
    held = HeldOut.from_json((prompts / "heldout.json").read_text())
    rng = np.random.default_rng(cfg.seed)
    max_objects = min(8, world.grid**2)
    scenes = []
    for i in range(cfg.train_scenes):
        objects = world.random_objects(rng, int(rng.integers(1, max_objects + 1)), held.allows_pair)
        scenes.append(world.render(objects, cfg.noise_std, rng))
        ctx.report("tokenizer scenes", i + 1, cfg.train_scenes)
    tok = fit_tokenizer(np.stack(scenes), world.grid, world.cell, cfg.shape_codes or len(world.shapes),
                        cfg.color_codes or len(world.colors), cfg.seed)
    checker = Checker(world)
    result = {"vocab_size": tok.vocab_size}
    for split in ("eval_heldout", "eval_seen"):
        specs = read_specs(prompts / f"{split}.parquet")
        result[f"roundtrip_pass_{split}"] = roundtrip_pass_rate(world, tok, checker, specs, cfg.noise_std, cfg.seed)
    tok.save(out)
    # evidence for the eye: noisy ground truth (left of each pair) and its decoded tokens (right)
    sample = read_specs(prompts / "eval_heldout.parquet")[:16]
    truth = np.stack([world.render(world.layout_for(s, rng), cfg.noise_std, rng) for s in sample])
    pairs = np.stack([x for pair in zip(truth, tok.decode(tok.encode(truth))) for x in pair])
    Image.fromarray(image_grid(pairs, cols=8)).save(out / "roundtrip.png")
    return result
