"""The benchmark stage: generate (resumable, shardable: tasks/cells.py), then score each cell
(tasks/benchmark_scores.py), beside the reward server when ImageReward or HPS is asked for.

Images are generated into the stage's state folder (runs/benchmark/<identity>/cells), which outlives a crash and
is shared by the runs that differ only in suites, step counts, variants or scorer settings; the stage's output
holds them (hard links) with each cell's scores and `table.csv` (one row per suite × metric × steps × variant).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from adapters import reward_server
from cogrpo.config import Params
from cogrpo.validate import benchmark_reward_terms
from flows.plots import figure, png
from tasks import benchmark_scores as scores
from tasks.benchmark import benchmark_cells, cell_folder, load_suite
from tasks.cells import link_images, wait_for_cells
from tasks.context import StageContext

SCORERS = {"embedded": scores.score_embedded, "embedded_seen": scores.score_embedded, "geneval": scores.score_geneval,
           "dpg": scores.score_dpg}
SERVED_SUITES = {"imagereward": scores.score_imagereward, "hpsv2": scores.score_hps}


def benchmark_stage(params: Params, inputs: dict[str, Path], out: Path, ctx: StageContext) -> dict:
    """Every cell generated (or found generated), then scored into out; returns {"scores": suite → metric →
    variant → steps → value}."""
    cfg, cells = params.benchmark, ctx.state_dir / "cells"
    wait_for_cells(params, inputs, benchmark_cells(params, inputs, ctx.state_dir), report=ctx.report, root=cells)
    suites = {s: load_suite(s, params, inputs["prompts"]) for s in cfg.suites}
    rows, n_cells, done = [], len(cfg.variants) * len(cfg.steps) * len(suites), 0
    with reward_server.serve(params.reward_models, benchmark_reward_terms(params), ctx.state_dir) as (url, _):
        for variant in cfg.variants:
            for steps in cfg.steps:
                for name, suite in suites.items():
                    cell, dest = cell_folder(cells, variant, steps, name), cell_folder(out, variant, steps, name)
                    link_images(cell, dest / "images")
                    score = SCORERS.get(name)
                    metrics = (score(params, suite, cell, dest) if score
                               else SERVED_SUITES[name](params, suite, cell, dest, url))
                    model, schedule = variant.split("-")
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
    return {"scores": nested}


HEADLINE = ("overall", "score", "mean", "average")  # the metric of a suite drawn against steps: its summary


def report_markdown(result: dict, out: Path) -> str:
    """reports/benchmarks.md: every suite's metrics, one row per metric and variant, one column per step count."""
    table = pl.read_csv(out / "table.csv")
    wide = (table.with_columns(pl.col("value").round(4), pl.format("{} steps", pl.col("steps")).alias("T"))
            .pivot(on="T", index=["suite", "metric", "model", "schedule"], values="value", sort_columns=False))
    with pl.Config(tbl_formatting="MARKDOWN", tbl_hide_column_data_types=True, tbl_hide_dataframe_shape=True,
                   tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=400):
        body = str(wide)
    return ("# Benchmarks\n\nWritten by the benchmark stage (`dvc repro benchmark`) from `outputs/benchmark/table.csv`: "
            "model = base (pretrained) or trained, schedule = base or learned (carried to each step count).\n\n"
            + body + "\n")


def steps_png(result: dict, out: Path, params: Params) -> bytes:
    """Each suite's summary metric against the step count, one line per model and schedule."""
    table = pl.read_csv(out / "table.csv").filter(pl.col("metric").str.split(".").list.last().is_in(HEADLINE))
    panels = table.select("suite", "metric").unique(maintain_order=True).rows()
    fig, axes = figure(len(panels), "Score against inference steps")
    for ax, (suite, metric) in zip(axes, panels):
        part = table.filter((pl.col("suite") == suite) & (pl.col("metric") == metric))
        for variant in part["variant"].unique(maintain_order=True):
            line = part.filter(pl.col("variant") == variant).sort("steps")
            ax.plot(line["steps"], line["value"], "o-" if variant.endswith("learned") else "s--", label=variant)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(part["steps"].unique()), [str(t) for t in sorted(part["steps"].unique())])
        ax.set_title(f"{suite}: {metric}", fontsize=9)
        ax.set_xlabel("steps")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return png(fig)
