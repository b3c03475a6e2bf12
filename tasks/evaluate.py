"""The evaluation stages' work: generate for the eval prompt sets under a schedule, check, write GenEval's layout.

The baseline and evaluate stages generate in cells (tasks/cells.py) under their state folder, one for the held-out
and one for the seen prompts, so their generation resumes after a crash and spreads over workers
(`python -m pipelines.generate evaluate --shard I --shards N`) with the same bytes as one process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from cogrpo.backbones.loading import load_generator
from cogrpo.benchmarks.geneval import evaluate, score, summarize
from cogrpo.benchmarks.specs import validate_embedded
from cogrpo.config import Params, ScheduleConfig
from cogrpo.guards import statistics
from cogrpo.core.schedule import base_knobs
from cogrpo.images import captioned_grid
from cogrpo.io import read_specs
from cogrpo.model_folder import ModelFolder
from cogrpo.world.checker import Checker
from cogrpo.world.prompts import GENEVAL_TAGS
from cogrpo.world.scenes import World
from tasks.cells import Cell, Suite, link_images, model_schedule, read_images, wait_for_cells
from tasks.context import StageContext


def _grid_prompts(rows: list[dict], per_tag: int = 2) -> list[str]:
    """The first `per_tag` prompt folders of every tag, in order."""
    chosen: dict[str, list[str]] = {}
    for r in rows:
        folder = r["filename"].split("/")[0]
        if folder not in chosen.setdefault(r["tag"], []) and len(chosen[r["tag"]]) < per_tag:
            chosen[r["tag"]].append(folder)
    return [f for folders in chosen.values() for f in folders]


def run_eval(params: Params, model_dir: Path, tokenizer_dir: Path, prompts_file: Path, knobs: torch.Tensor,
             report, label: str) -> tuple[list[dict], np.ndarray]:
    """Results rows (GenEval's, one per image) and the decoded images of one prompt set under one schedule."""
    torch.set_num_threads(params.threads)
    specs = read_specs(prompts_file)
    validate_embedded(specs, params.world, prompts_file)  # every row against the world, before generating
    gen = load_generator(params.model, {"model": model_dir, "tokenizer": tokenizer_dir}, params.world)
    cfg = params.eval
    return evaluate(gen, Checker(World(params.world)), specs, knobs, cfg.samples_per_prompt, cfg.seed,
                    cfg.batch_prompts, on_batch=lambda done, total: report(label, done, total))


def write_results(out: Path, rows: list[dict], images: np.ndarray, title: str) -> None:
    """Beside the images in GenEval's layout (<i>/samples/<j>.png, <i>/metadata.jsonl): results.jsonl (one row per
    image of GenEval's six tags: GenEval's summary_scores.py counts every tag in the file as a task, so its overall
    equals ours), results_dpg.jsonl (the DPG-style prompts' rows), grid.png (two prompts per tag, captioned, each
    sample framed green or red by the checker's verdict)."""
    for name, part in (("results.jsonl", [r for r in rows if r["tag"] in GENEVAL_TAGS]),
                       ("results_dpg.jsonl", [r for r in rows if r["tag"] not in GENEVAL_TAGS])):
        if part:
            (out / name).write_text("".join(json.dumps(r) + "\n" for r in part))
    folders = _grid_prompts(rows)
    picked = [[i for i, r in enumerate(rows) if r["filename"].startswith(f + "/")] for f in folders]
    grid = captioned_grid(np.stack([images[idx] for idx in picked]),
                          [f"[{rows[idx[0]]['tag']}] {rows[idx[0]]['prompt']}" for idx in picked],
                          [[rows[i]["correct"] for i in idx] for idx in picked], title)
    Image.fromarray(grid).save(out / "grid.png")


def embedded_suite(params: Params, path: Path, limit: int | None = None, name: str = "embedded") -> Suite:
    """An embedded prompt set (a parquet file of the prompts stage), every row validated against the world."""
    loaded = validate_embedded(read_specs(path), params.world, path)[:limit]
    return Suite(name, [p.prompt for p in loaded], [p.metadata for p in loaded], params.eval.samples_per_prompt)


def eval_cells(params: Params, inputs: dict[str, Path], state_dir: Path) -> list[Cell]:
    """The evaluation's cells: the held-out and the seen prompts, the model under its own schedule (model_schedule:
    its prompt-conditioned policy, its learned schedule, or without either the base schedule)."""
    knobs, policy = model_schedule(params, inputs["model"])
    return [Cell(state_dir / split, embedded_suite(params, inputs["prompts"] / f"eval_{split}.parquet"), knobs, "model",
                 policy) for split in ("heldout", "seen")]


def _checked(params: Params, cell: Cell) -> tuple[list[dict], np.ndarray]:
    images, prompt_index = read_images(cell.suite, cell.folder, params.eval.batch_prompts)
    return score(Checker(World(params.world)), images, cell.suite.metadata, prompt_index), images


def evaluate_model(params: Params, inputs: dict[str, Path], out: Path, ctx: StageContext) -> dict:
    """The model under its own schedule: held-out prompts in GenEval's layout → out, seen prompts scored only. The
    result's "guards" (beside summary.json, not in it): the held-out images' guard statistics (cogrpo.guards)."""
    cells = eval_cells(params, inputs, ctx.state_dir)
    wait_for_cells(params, inputs, cells, report=ctx.report, root=ctx.state_dir, warn=ctx.warn)
    (rows, images), (seen, _) = (_checked(params, cell) for cell in cells)
    link_images(cells[0].folder, out)
    steps = params.schedule.steps
    title = (f"trained model, learned schedule, {steps} steps" if ModelFolder(inputs["model"]).learned
             else f"base model, base schedule, {steps} steps")
    write_results(out, rows, images, f"{title} (green: passes the checker, red: fails)")
    result = {"heldout": summarize(rows) | {"steps": steps}, "seen": summarize(seen) | {"steps": steps}}
    (out / "summary.json").write_text(json.dumps(result, indent=1) + "\n")
    return result | {"guards": statistics(images, params.eval.samples_per_prompt)}


def schedule_sweep(params: Params, inputs: dict[str, Path], out: Path, ctx: StageContext) -> dict:
    """The base schedule and every hand-set schedule of params.sweep on the held-out prompts: the spread of
    accuracy across schedules is the evidence that the knobs matter."""
    schedules: dict[str, ScheduleConfig] = {"base": params.schedule} | {s.name: s.apply(params.schedule)
                                                                          for s in params.sweep}
    results = {}
    for name, cfg in schedules.items():
        rows, _ = run_eval(params, inputs["model"], inputs["tokenizer"], inputs["prompts"] / "eval_heldout.parquet",
                           base_knobs(cfg), ctx.report, f"schedule {name}")
        results[name] = summarize(rows)
    overall = [r["geneval"]["overall"] for r in results.values()]
    return {"schedules": results, "spread": max(overall) - min(overall)}
