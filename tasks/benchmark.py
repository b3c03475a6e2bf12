"""The benchmark stage's work: generate every variant × step count × suite with the project's sampler, then score.

A cell (one variant, step count and suite) is a folder: `images/` in GenEval's layout (`<i:05d>/metadata.jsonl`,
`<i:05d>/samples/<j:04d>.png`), `done/<b:05d>` for each finished batch of `eval.batch_prompts` prompts, then the
scores. Batches are fixed by the prompt list alone, and each trajectory's noise by its global index, so any shard
of the batches (batch b belongs to shard b mod n), any crash and rerun, or any order gives the same images: a
batch marked done is never generated again, and one cut off mid-way is generated whole.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from cogrpo.backbones.loading import load_generator
from cogrpo.benchmarks.geneval import trajectory_seeds
from cogrpo.config import Params
from cogrpo.core.generator import Generator
from cogrpo.core.sampler import sample
from cogrpo.core.schedule import resolve_schedule

BENCHMARK_FILES = Path(__file__).resolve().parents[1] / "data" / "benchmarks"


@dataclass(frozen=True)
class Suite:
    """A benchmark's prompts, validated: `metadata[i]` is what its scorer needs of prompt i (a GenEval spec, a
    DPG item id, an HPS style, an ImageReward id)."""

    name: str
    prompts: list[str]
    metadata: list[dict]
    samples: int


def load_suite(name: str, params: Params, prompts_dir: Path) -> Suite:
    """The suite's prompt file read and validated (every row, before anything is generated)."""
    from cogrpo.benchmarks import specs

    cfg = params.benchmark
    if name == "embedded":
        from cogrpo.io import read_specs

        path = prompts_dir / "eval_heldout.parquet"
        rows = read_specs(path)
        specs.validate_embedded(rows, params.world, path)
        records, samples = [(r["prompt"], r) for r in rows], params.eval.samples_per_prompt
    elif name == "geneval":
        loaded = specs.load_geneval(BENCHMARK_FILES / "geneval_evaluation_metadata.jsonl",
                                    BENCHMARK_FILES / "geneval_object_names.txt")
        records, samples = [(p.prompt, p.metadata) for p in loaded], cfg.samples_per_prompt.geneval
    elif name == "dpg":
        loaded = specs.load_dpg_prompts(BENCHMARK_FILES / "dpg_bench_prompts.jsonl")
        records, samples = [(p.prompt, p.metadata) for p in loaded], cfg.samples_per_prompt.dpg
    elif name == "imagereward":
        loaded = specs.load_imagereward(BENCHMARK_FILES / "imagereward_benchmark_prompts.json")
        records, samples = [(p.prompt, p.metadata) for p in loaded], cfg.samples_per_prompt.imagereward
    elif name == "hpsv2":
        loaded = specs.load_hps(BENCHMARK_FILES / "hpsv2_benchmark_prompts.jsonl")
        records, samples = [(p.prompt, p.metadata) for p in loaded], cfg.samples_per_prompt.hpsv2
    else:
        raise ValueError(name)
    records = records[: cfg.max_prompts]
    return Suite(name, [p for p, _ in records], [m for _, m in records], samples)


def variant_knobs(params: Params, variant: str, steps: int, trained: Path) -> torch.Tensor:
    """The (T, 4) schedule of a variant at `steps`: the base schedule, or the trained model's learned one carried
    to `steps`."""
    learned = variant.endswith("-learned")
    return resolve_schedule(params.schedule, trained / "schedule.json" if learned else None, steps)


def cell_folder(root: Path, variant: str, steps: int, suite: str) -> Path:
    return root / variant / f"steps_{steps:02d}" / suite


def batches(suite: Suite, batch_prompts: int) -> int:
    return math.ceil(len(suite.prompts) / batch_prompts)


def _write_png(path: Path, image: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    Image.fromarray(image).save(tmp, format="PNG")
    os.replace(tmp, path)


def generate_cell(gen: Generator, suite: Suite, knobs: torch.Tensor, seed: int, batch_prompts: int, cell: Path,
                  shard: int = 0, shards: int = 1, on_batch: Callable[[int], None] | None = None) -> int:
    """Generate the batches of shard `shard` of `shards` not yet done into cell/images; returns how many ran."""
    ran = 0
    (cell / "done").mkdir(parents=True, exist_ok=True)
    for b in range(shard, batches(suite, batch_prompts), shards):
        marker = cell / "done" / f"{b:05d}"
        if marker.exists():
            continue
        start = b * batch_prompts
        chunk = suite.prompts[start:start + batch_prompts]
        rows = torch.arange(start, start + len(chunk)).repeat_interleave(suite.samples)
        with torch.no_grad():
            traj = sample(gen, gen.encode(chunk).repeat_interleave(suite.samples), knobs,
                          trajectory_seeds(seed, len(rows), start * suite.samples), rows)
        images = gen.decode(traj.tokens)
        for k, (p, img) in enumerate(zip(rows.tolist(), images)):
            folder = cell / "images" / f"{p:05d}"
            (folder / "samples").mkdir(parents=True, exist_ok=True)
            if k % suite.samples == 0:
                (folder / "metadata.jsonl").write_text(json.dumps(suite.metadata[p]) + "\n")
            _write_png(folder / "samples" / f"{k % suite.samples:04d}.png", img)
        marker.touch()
        ran += 1
        if on_batch:
            on_batch(b)
    return ran


def cell_done(suite: Suite, batch_prompts: int, cell: Path) -> bool:
    return all((cell / "done" / f"{b:05d}").exists() for b in range(batches(suite, batch_prompts)))


def read_images(suite: Suite, cell: Path) -> tuple[np.ndarray, torch.Tensor]:
    """All of a cell's images, prompt-major, and the prompt index of each."""
    images = [np.asarray(Image.open(cell / "images" / f"{p:05d}" / "samples" / f"{j:04d}.png").convert("RGB"))
              for p in range(len(suite.prompts)) for j in range(suite.samples)]
    return np.stack(images), torch.arange(len(suite.prompts)).repeat_interleave(suite.samples)


def generate_all(params: Params, inputs: dict[str, Path], root: Path, shard: int = 0, shards: int = 1,
                 report: Callable[..., None] | None = None) -> dict[str, int]:
    """Every cell's batches of one shard; returns batches generated per cell (0 where all were done)."""
    cfg, suites = params.benchmark, {s: load_suite(s, params, inputs["prompts"]) for s in params.benchmark.suites}
    ran: dict[str, int] = {}
    for model in sorted({v.split("-")[0] for v in cfg.variants}):
        gen = None  # loaded only if some cell of this model still has work
        for variant in [v for v in cfg.variants if v.startswith(model + "-")]:
            for steps in cfg.steps:
                knobs = variant_knobs(params, variant, steps, inputs["trained"])
                for name, suite in suites.items():
                    cell = cell_folder(root, variant, steps, name)
                    if cell_done(suite, params.eval.batch_prompts, cell):
                        ran[str(cell.relative_to(root))] = 0
                        continue
                    if gen is None:
                        torch.set_num_threads(params.pretrain.threads)
                        gen = load_generator(params.model, {"model": inputs[model], "tokenizer": inputs["tokenizer"]})
                    label = f"{variant} · {steps} steps · {name}"
                    total = batches(suite, params.eval.batch_prompts)
                    ran[str(cell.relative_to(root))] = generate_cell(
                        gen, suite, knobs, params.eval.seed, params.eval.batch_prompts, cell, shard, shards,
                        on_batch=lambda b, label=label, total=total: report and report(label, b + 1, total))
    return ran
