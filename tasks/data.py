"""Tasks of the data stages: prompt sets and the VQ tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from prefect import task
from tqdm.auto import tqdm

from cogrpo.benchmark import image_grid, roundtrip_pass_rate
from cogrpo.checker import Checker
from cogrpo.config import Params
from cogrpo.io import atomic_dir, read_specs, write_specs
from cogrpo.prompts import HeldOut, make_prompt_sets, split_report
from cogrpo.scenes import World
from cogrpo.tokenizer import fit_tokenizer

PROMPT_SETS = ("train", "eval_heldout", "eval_seen")


@task
def write_prompt_sets(params: Params, out_dir: str) -> dict:
    """Write <out_dir>/{train,eval_heldout,eval_seen}.parquet and heldout.json; return the split report."""
    sets, held = make_prompt_sets(World(params.world), params.prompts)
    with atomic_dir(out_dir) as tmp:
        for name in PROMPT_SETS:
            write_specs(tmp / f"{name}.parquet", sets[name])
        (tmp / "heldout.json").write_text(held.to_json())
    return split_report(sets, held)


@task
def train_tokenizer(params: Params, prompts_dir: str, out_dir: str) -> dict:
    """Fit the codebooks on noisy random scenes (held-out colour–shape pairs excluded); measure the round trip."""
    world, cfg = World(params.world), params.tokenizer
    held = HeldOut.from_json((Path(prompts_dir) / "heldout.json").read_text())
    rng = np.random.default_rng(cfg.seed)
    max_objects = min(8, world.grid**2)
    scenes = np.stack([world.render(world.random_objects(rng, int(rng.integers(1, max_objects + 1)), held.allows_pair),
                                    cfg.noise_std, rng) for _ in tqdm(range(cfg.train_scenes), desc="tokenizer scenes")])
    tok = fit_tokenizer(scenes, world.grid, world.cell, cfg.shape_codes or len(world.shapes),
                        cfg.color_codes or len(world.colors), cfg.seed)
    checker = Checker(world)
    report = {"vocab_size": tok.vocab_size}
    for split in ("eval_heldout", "eval_seen"):
        specs = read_specs(Path(prompts_dir) / f"{split}.parquet")
        report[f"roundtrip_pass_{split}"] = roundtrip_pass_rate(world, tok, checker, specs, cfg.noise_std, cfg.seed)
    with atomic_dir(out_dir) as tmp:
        tok.save(tmp)
        # evidence for the eye: noisy ground truth (left of each pair) and its decoded tokens (right)
        sample = read_specs(Path(prompts_dir) / "eval_heldout.parquet")[:16]
        truth = np.stack([world.render(world.layout_for(s, rng), cfg.noise_std, rng) for s in sample])
        pairs = np.stack([x for pair in zip(truth, tok.decode(tok.encode(truth))) for x in pair])
        Image.fromarray(image_grid(pairs, cols=8)).save(tmp / "roundtrip.png")
    return report
