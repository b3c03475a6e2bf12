"""The benchmark stage's work: every variant (and each model of benchmark.models, under the base schedule) × step
count × suite generated with the project's sampler in cells (tasks/cells.py: resumable, shardable), then each cell
scored (tasks/benchmark_scores.py), beside the reward server when ImageReward or HPS is asked for (the stage
context's `reward_server`).

Images are generated into the stage's state folder (runs/benchmark/<identity>/cells), which outlives a crash and
is shared by the runs that differ only in suites, step counts, variants or scorer settings; the stage's output
holds them (hard links) with each cell's scores and `table.csv` (one row per suite × metric × steps × variant).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from cogrpo.backbones.snapshot import snapshot_folder
from cogrpo.benchmarks.steps import steps_saved, steps_to_reach
from cogrpo.config import SUITES, Params
from cogrpo.core.schedule import resolve_schedule
from cogrpo.errors import InputError
from cogrpo.validate import benchmark_reward_terms
from tasks import benchmark_scores as scores
from tasks.cells import Cell, Suite, link_images, model_schedule, wait_for_cells
from tasks.context import StageContext
from tasks.evaluate import embedded_suite

BENCHMARK_FILES = Path(__file__).resolve().parents[1] / "data" / "benchmarks"

PUBLISHED = {  # suite → its prompt file(s) in data/benchmarks and the schema that reads them (cogrpo.benchmarks.specs)
    "geneval": ("load_geneval", "geneval_evaluation_metadata.jsonl", "geneval_object_names.txt"),
    "dpg": ("load_dpg_prompts", "dpg_bench_prompts.jsonl"),
    "imagereward": ("load_imagereward", "imagereward_benchmark_prompts.json"),
    "hpsv2": ("load_hps", "hpsv2_benchmark_prompts.jsonl"),
}


def load_suite(name: str, params: Params, prompts_dir: Path) -> Suite:
    """The suite's prompts (its first benchmark.max_prompts), every row of its file validated first."""
    from cogrpo.benchmarks import specs

    cfg = params.benchmark
    if name.startswith("embedded"):
        split = "seen" if name == "embedded_seen" else "heldout"
        return embedded_suite(params, prompts_dir / f"eval_{split}.parquet", cfg.max_prompts, name)
    loader, *files = PUBLISHED[name]
    loaded = getattr(specs, loader)(*(BENCHMARK_FILES / f for f in files))[: cfg.max_prompts]
    if name == "dpg" and cfg.dpg.csv:  # the question graph read now: a wrong file fails before any generation
        from cogrpo.benchmarks.dpg import load_question_graph

        graph = load_question_graph(cfg.dpg.csv, strict=False)
        missing = [p.group for p in loaded if p.group not in graph]
        if len(missing) > 1:  # DPG's own skip of the CSV's first row can cost one item, no more
            raise InputError(f"{cfg.dpg.csv}: {len(missing)} of {len(loaded)} DPG-Bench prompts have no questions "
                             f"there (first: {missing[0]}): give DPG-Bench's own dpg_bench.csv")
    return Suite(name, [p.prompt for p in loaded], [p.metadata for p in loaded], getattr(cfg.samples_per_prompt, name))


def cell_folder(root: Path, variant: str, steps: int, suite: str) -> Path:
    return root / variant / f"steps_{steps:02d}" / suite


def benchmark_cells(params: Params, inputs: dict[str, Path], state_dir: Path) -> list[Cell]:
    """The benchmark stage's cells under its state folder, model by model (each model loaded once)."""
    cfg = params.benchmark
    external = {variant: snapshot_folder(folder, params.model.backbone)  # a missing one fails now, in one line
                for variant, folder in cfg.external().items()}
    suites = [load_suite(s, params, inputs["prompts"]) for s in cfg.suites]
    models = sorted({v.split("-")[0] for v in cfg.variants})
    cells = []
    for model in models:
        for variant in [v for v in cfg.variants if v.startswith(model + "-")]:
            for steps in cfg.steps:  # a learned schedule is the trained model's, carried to each step count
                knobs, policy = (model_schedule(params, inputs["trained"], steps) if variant.endswith("-learned")
                                 else (resolve_schedule(params.schedule, None, steps), None))
                cells += [Cell(cell_folder(state_dir / "cells", variant, steps, suite.name), suite, knobs, model,
                               policy) for suite in suites]
    for variant, folder in external.items():  # benchmark.models: each under the base schedule
        for steps in cfg.steps:
            knobs = resolve_schedule(params.schedule, None, steps)
            cells += [Cell(cell_folder(state_dir / "cells", variant, steps, suite.name), suite, knobs,
                           split_variant(variant)[0], snapshot=str(folder)) for suite in suites]
    return cells


def split_variant(variant: str) -> tuple[str, str]:
    """(model, schedule) of a variant: 'trained-learned' → ('trained', 'learned'); a model of benchmark.models
    keeps the dashes of its folder's name."""
    model, schedule = variant.rsplit("-", 1)
    return model, schedule


# suite → its scorer, (params, suite, cell, dest) → metrics, or for a suite scored by the reward server,
# (params, suite, cell, dest, url) → metrics; every suite config.SuiteName declares, no other
SCORERS = {"embedded": scores.score_embedded, "embedded_seen": scores.score_embedded, "geneval": scores.score_geneval,
           "dpg": scores.score_dpg, "imagereward": scores.score_imagereward, "hpsv2": scores.score_hps}
SERVED = {"imagereward", "hpsv2"}
assert SCORERS.keys() == set(SUITES) and SERVED <= SCORERS.keys() and PUBLISHED.keys() <= SCORERS.keys()
HEADLINE = ("overall", "score", "mean", "average")  # the metric of a suite drawn against steps: its summary
BASE_VARIANT, BASE_STEPS = "base-base", (8, 16)  # steps saved: reaching the base model's score at 8 and at 16 steps


def steps_to_base(scores: dict) -> dict:
    """suite → headline metric → variant → T → {"steps": the fewest steps at which the variant reaches the base
    model's score at T steps (interpolated over the step grid, cogrpo.benchmarks.steps; None: not within it),
    "saved": T ÷ that}, for each T of BASE_STEPS in the grid; empty without the base-base variant."""
    out: dict = {}
    for suite, metrics in scores.items():
        for metric, variants in metrics.items():
            base = variants.get(BASE_VARIANT, {})
            targets = [t for t in BASE_STEPS if str(t) in base]
            if metric.split(".")[-1] not in HEADLINE or not targets:
                continue
            for variant, values in variants.items():
                curve = {int(s): v for s, v in values.items()}
                needed = {t: steps_to_reach(curve, base[str(t)]) for t in targets}
                out.setdefault(suite, {}).setdefault(metric, {})[variant] = {
                    str(t): {"steps": n, "saved": steps_saved(t, n)} for t, n in needed.items()}
    return out


def benchmark_stage(params: Params, inputs: dict[str, Path], out: Path, ctx: StageContext) -> dict:
    """Every cell generated (or found generated), then scored into out; returns {"scores": suite → metric →
    variant → steps → value, "steps_to_base": steps_to_base(scores)}."""
    cfg, cells = params.benchmark, ctx.state_dir / "cells"
    wait_for_cells(params, inputs, benchmark_cells(params, inputs, ctx.state_dir), report=ctx.report, root=cells,
                   warn=ctx.warn)
    suites = {s: load_suite(s, params, inputs["prompts"]) for s in cfg.suites}
    rows, n_cells, done = [], len(cfg.all_variants()) * len(cfg.steps) * len(suites), 0
    with ctx.reward_server(benchmark_reward_terms(params)) as (url, _):
        for variant in cfg.all_variants():
            for steps in cfg.steps:
                for name, suite in suites.items():
                    cell, dest = cell_folder(cells, variant, steps, name), cell_folder(out, variant, steps, name)
                    link_images(cell, dest / "images")
                    served = (url,) if name in SERVED else ()
                    metrics = SCORERS[name](params, suite, cell, dest, *served)
                    model, schedule = split_variant(variant)
                    rows += [{"suite": name, "metric": m, "steps": steps, "variant": variant, "model": model,
                              "schedule": schedule, "value": v} for m, v in metrics.items()]
                    done += 1
                    ctx.report("benchmark scoring", done, n_cells)
    table = pl.DataFrame(rows)
    table.write_csv(out / "table.csv")
    nested: dict = {}
    for r in rows:
        nested.setdefault(r["suite"], {}).setdefault(r["metric"], {}).setdefault(r["variant"], {})[
            str(r["steps"])] = r["value"]
    return {"scores": nested, "steps_to_base": steps_to_base(nested)}
