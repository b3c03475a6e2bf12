"""The data stages' work: prompt sets and the VQ tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from cogrpo.config import Params
from cogrpo.errors import InputError
from cogrpo.images import image_grid
from cogrpo.io import read_specs, write_specs
from cogrpo.world.checker import Checker
from cogrpo.world.prompts import HeldOut, make_prompt_sets, split_report
from cogrpo.world.scenes import World
from cogrpo.world.tokenizer import fit_tokenizer, roundtrip_pass_rate
from tasks.context import StageContext

PROMPT_SETS = ("train", "eval_heldout", "eval_seen")
NATURAL = "train_natural.parquet"  # prompts.train_file's prompts, when given: what the train stage trains on


def write_prompt_sets(params: Params, inputs: dict[str, Path], out: Path, ctx: StageContext) -> dict:
    """<out>/{train,eval_heldout,eval_seen}.parquet and heldout.json, and with prompts.train_file its prompts as
    train_natural.parquet (tag 'natural', no world spec); returns the split report."""
    sets, held = make_prompt_sets(World(params.world), params.prompts)
    for name in PROMPT_SETS:
        write_specs(out / f"{name}.parquet", sets[name])
    (out / "heldout.json").write_text(held.to_json())
    report = split_report(sets, held)
    if params.prompts.train_file:
        natural = read_natural_prompts(Path(params.prompts.train_file))
        write_specs(out / NATURAL, [{"prompt": p, "tag": "natural", "include": []} for p in natural])
        report["train_natural"] = {"file": params.prompts.train_file, "prompts": len(natural)}
    return report


def read_natural_prompts(path: Path) -> list[str]:
    """The prompts of a .txt (one per line) or .jsonl ({"prompt": …} per line) file, blank lines skipped; a
    missing file, a line that is not a prompt, or no prompt at all is one error naming the file and line."""
    if not path.is_file():
        raise InputError(f"{path}: training prompt file not found (prompts.train_file)")
    prompts = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        if path.suffix == ".jsonl":
            try:
                line = json.loads(line)["prompt"]
            except (json.JSONDecodeError, TypeError, KeyError):
                raise InputError(f"{path}:{n}: not a JSON object with a 'prompt'") from None
        if not isinstance(line, str) or not line.strip():
            raise InputError(f"{path}:{n}: the prompt is not a non-empty string")
        prompts.append(line.strip())
    if not prompts:
        raise InputError(f"{path}: no prompts (prompts.train_file)")
    return prompts


def training_prompts(prompts: Path) -> Path:
    """The prompt file the train stage trains on: prompts.train_file's (train_natural.parquet) where the prompts
    stage wrote one, else the embedded world's train.parquet."""
    return prompts / NATURAL if (prompts / NATURAL).is_file() else prompts / "train.parquet"


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
