"""Task of the evaluation stages: generate for a prompt set under a schedule, check, write GenEval's layout."""

from __future__ import annotations

import json

import numpy as np
import torch
from PIL import Image
from prefect import task

from cogrpo.benchmark import evaluate, image_grid, summarize
from cogrpo.checker import Checker
from cogrpo.config import Params
from cogrpo.io import atomic_dir, read_specs
from cogrpo.model import MDM
from cogrpo.scenes import World
from cogrpo.text import TextEncoder
from cogrpo.tokenizer import Tokenizer


def _grid_rows(rows: list[dict], per_tag: int = 2) -> list[int]:
    """Image indices of the first `per_tag` prompts of every tag, all their samples."""
    prompts: dict[str, list[str]] = {}
    for r in rows:
        folder = r["filename"].split("/")[0]
        if folder not in prompts.setdefault(r["tag"], []) and len(prompts[r["tag"]]) < per_tag:
            prompts[r["tag"]].append(folder)
    keep = {f for folders in prompts.values() for f in folders}
    return [i for i, r in enumerate(rows) if r["filename"].split("/")[0] in keep]


@task
def evaluate_schedule(params: Params, model_dir: str, tokenizer_dir: str, prompts_file: str, knobs: list[list[float]],
                      out_dir: str | None = None) -> dict:
    """Summary of one evaluation; with out_dir, also GenEval's layout there: <i>/samples/<j>.png,
    <i>/metadata.jsonl, results.jsonl (one row per image) and grid.png (two prompts per tag × samples)."""
    torch.set_num_threads(params.pretrain.threads)
    specs = read_specs(prompts_file)
    model, tokenizer = MDM.load(model_dir), Tokenizer.load(tokenizer_dir)
    text = TextEncoder(model.cfg.text_encoder, model.cfg.max_text_tokens)
    cfg = params.eval
    rows, images = evaluate(model, text, tokenizer, Checker(World(params.world)), specs, torch.tensor(knobs),
                            cfg.samples_per_prompt, cfg.seed, cfg.batch_prompts, progress=True)
    summary = summarize(rows)
    if out_dir:
        with atomic_dir(out_dir) as tmp:
            for row, img in zip(rows, images):
                path = tmp / row["filename"]
                if not path.parent.exists():
                    path.parent.mkdir(parents=True)
                    (path.parent.parent / "metadata.jsonl").write_text(row["metadata"] + "\n")
                Image.fromarray(img).save(path)
            (tmp / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            grid = image_grid(images[_grid_rows(rows)], cols=2 * cfg.samples_per_prompt)
            Image.fromarray(np.kron(grid, np.ones((2, 2, 1), np.uint8))).save(tmp / "grid.png")
    return summary
