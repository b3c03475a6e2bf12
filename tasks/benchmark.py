"""The benchmark stage's work: generate every variant × step count × suite with the project's sampler, then score.

A cell (one variant, step count and suite) is a folder: `images/` in GenEval's layout (`<i:05d>/metadata.jsonl`,
`<i:05d>/samples/<j:04d>.png`), then `done/<b:05d>` for each batch of `eval.batch_prompts` prompts whose images
are on disk (fsynced before the marker). Batches are fixed by the prompt list alone, and each trajectory's noise by
its index in the whole set, so any shard of the batches (batch b belongs to shard b mod n), any crash and rerun,
or any order gives the same images: a batch marked done is never generated again, one cut off mid-way is
generated whole. A worker claims a batch with `done/<b:05d>.lock` (created exclusively, holding its pid), so
shard workers and the stage can run at once; the lock of a dead worker is taken over.
"""

from __future__ import annotations

import io
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from cogrpo.backbones.loading import load_generator
from cogrpo.benchmarks.geneval import sample_batch
from cogrpo.config import Params
from cogrpo.core.generator import Generator
from cogrpo.core.schedule import resolve_schedule
from cogrpo.errors import InputError
from cogrpo.io import fsync_dir, process_alive, write_bytes_atomic, write_text_atomic

BENCHMARK_FILES = Path(__file__).resolve().parents[1] / "data" / "benchmarks"


@dataclass(frozen=True)
class Suite:
    """A benchmark's prompts, validated: `metadata[i]` is what its scorer needs of prompt i (a GenEval spec, a
    DPG item id, an HPS style, an ImageReward id)."""

    name: str
    prompts: list[str]
    metadata: list[dict]
    samples: int


PUBLISHED = {  # suite → its prompt file(s) in data/benchmarks and the schema that reads them (cogrpo.benchmarks.specs)
    "geneval": ("load_geneval", "geneval_evaluation_metadata.jsonl", "geneval_object_names.txt"),
    "dpg": ("load_dpg_prompts", "dpg_bench_prompts.jsonl"),
    "imagereward": ("load_imagereward", "imagereward_benchmark_prompts.json"),
    "hpsv2": ("load_hps", "hpsv2_benchmark_prompts.jsonl"),
}


def load_suite(name: str, params: Params, prompts_dir: Path) -> Suite:
    """The suite's prompts (its first benchmark.max_prompts), every row of its file validated first."""
    from cogrpo.benchmarks import specs
    from cogrpo.io import read_specs

    cfg = params.benchmark
    if name == "embedded":
        path = prompts_dir / "eval_heldout.parquet"
        loaded, samples = specs.validate_embedded(read_specs(path), params.world, path), params.eval.samples_per_prompt
    else:
        loader, *files = PUBLISHED[name]
        loaded, samples = getattr(specs, loader)(*(BENCHMARK_FILES / f for f in files)), getattr(
            cfg.samples_per_prompt, name)
    loaded = loaded[: cfg.max_prompts]
    if name == "dpg" and cfg.dpg.csv:  # the question graph read now: a wrong file fails before any generation
        from cogrpo.benchmarks.dpg import load_question_graph

        graph = load_question_graph(cfg.dpg.csv, strict=False)
        missing = [p.group for p in loaded if p.group not in graph]
        if len(missing) > 1:  # DPG's own skip of the CSV's first row can cost one item, no more
            raise InputError(f"{cfg.dpg.csv}: {len(missing)} of {len(loaded)} DPG-Bench prompts have no questions "
                             f"there (first: {missing[0]}): give DPG-Bench's own dpg_bench.csv")
    return Suite(name, [p.prompt for p in loaded], [p.metadata for p in loaded], samples)


def variant_knobs(params: Params, variant: str, steps: int, trained: Path) -> torch.Tensor:
    """The (T, 4) schedule of a variant at `steps`: the base schedule, or the trained model's learned one carried
    to `steps`."""
    learned = variant.endswith("-learned")
    return resolve_schedule(params.schedule, trained / "schedule.json" if learned else None, steps)


def cell_folder(root: Path, variant: str, steps: int, suite: str) -> Path:
    return root / variant / f"steps_{steps:02d}" / suite


def batches(suite: Suite, batch_prompts: int) -> int:
    return math.ceil(len(suite.prompts) / batch_prompts)


def _png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


STALE_CLAIM_S = 60.0  # a lock file still empty after this long was left by a worker killed while creating it


def _claim(lock: Path) -> bool:
    """Create the batch's lock file holding this pid; False while another live worker holds it (a dead one's lock
    is taken over)."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder, age = lock.read_text().strip(), time.time() - lock.stat().st_mtime
            except OSError:  # released meanwhile
                continue
            if (holder.isdigit() and process_alive(int(holder))) or (not holder and age < STALE_CLAIM_S):
                return False
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
        return True
    return False


def generate_cell(gen: Generator, suite: Suite, knobs: torch.Tensor, seed: int, batch_prompts: int, cell: Path,
                  shard: int = 0, shards: int = 1, on_batch: Callable[[int], None] | None = None) -> int:
    """Generate the batches of shard `shard` of `shards` that are neither done nor claimed by a live worker;
    returns how many it generated."""
    ran, done = 0, cell / "done"
    done.mkdir(parents=True, exist_ok=True)
    for b in range(shard, batches(suite, batch_prompts), shards):
        marker, lock = done / f"{b:05d}", done / f"{b:05d}.lock"
        if marker.exists() or not _claim(lock):
            continue
        try:
            if marker.exists():  # finished by a worker between our check and our claim
                continue
            start = b * batch_prompts
            chunk = suite.prompts[start:start + batch_prompts]
            with torch.no_grad():
                traj = sample_batch(gen, chunk, start, knobs, suite.samples, seed)
            folders = set()
            for k, (p, img) in enumerate(zip(traj.prompt_index.tolist(), gen.decode(traj.tokens))):
                folder = cell / "images" / f"{p:05d}"
                if k % suite.samples == 0:
                    write_text_atomic(folder / "metadata.jsonl", json.dumps(suite.metadata[p]) + "\n")
                write_bytes_atomic(folder / "samples" / f"{k % suite.samples:04d}.png", _png(img))
                folders |= {folder, folder / "samples"}
            for folder in folders | {cell / "images"}:
                fsync_dir(folder)
            write_bytes_atomic(marker, b"")
            fsync_dir(done)
        finally:
            lock.unlink(missing_ok=True)
        ran += 1
        if on_batch:
            on_batch(b)
    return ran


def cell_done(suite: Suite, batch_prompts: int, cell: Path) -> bool:
    return all((cell / "done" / f"{b:05d}").exists() for b in range(batches(suite, batch_prompts)))


def read_images(suite: Suite, cell: Path, batch_prompts: int) -> tuple[np.ndarray, torch.Tensor]:
    """All of a cell's images, prompt-major, and the prompt index of each."""
    images = []
    for p in range(len(suite.prompts)):
        for j in range(suite.samples):
            png = cell / "images" / f"{p:05d}" / "samples" / f"{j:04d}.png"
            try:
                images.append(np.asarray(Image.open(png).convert("RGB")))
            except (OSError, ValueError) as err:
                marker = cell / "done" / f"{p // batch_prompts:05d}"
                raise InputError(f"{png}: unreadable ({type(err).__name__}); delete {marker} and rerun to generate "
                                 "its batch again") from None
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


def wait_for_cells(params: Params, inputs: dict[str, Path], root: Path, poll_s: float = 2.0,
                   report: Callable[..., None] | None = None) -> None:
    """Generate whatever is left (also batches whose worker died) until every cell is done: batches claimed by
    live shard workers are theirs to finish."""
    while True:
        generate_all(params, inputs, root, report=report)
        suites = [load_suite(s, params, inputs["prompts"]) for s in params.benchmark.suites]
        if all(cell_done(suite, params.eval.batch_prompts, cell_folder(root, v, t, suite.name))
               for v in params.benchmark.variants for t in params.benchmark.steps for suite in suites):
            return
        time.sleep(poll_s)
