"""The stages' metrics files (JSON, CSV, markdown) as views of their results: `view(result, out) → text`.

flows/stages.py names each file with its view; the `stage` flow writes them after the stage (flows/pipeline.py),
DVC shows them. A view reads only the result and the stage's output folder, so the same result gives the same text.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from cogrpo.model_folder import ModelFolder


def json_text(value) -> str:
    return json.dumps(value, indent=1) + "\n"


def pretrain_loss(result: dict, out: Path) -> str:
    return "step,loss\n" + "".join(f"{h['step']},{h['loss']:.5f}\n" for h in result["history"])


TRAIN_CURVES = ["reward_mean", "reward_std", "zero_std_groups", "model/kl"]


def train_curves(result: dict) -> pl.DataFrame:
    """A training result's per-iteration curves (names with "/" as "_", as DVC's plots take them)."""
    history = pl.DataFrame(result["history"])
    return history.select("iteration", *[pl.col(c).alias(c.replace("/", "_")) for c in TRAIN_CURVES
                                         if c in history.columns])


def train_summary(result: dict, out: Path) -> str:
    curves = train_curves(result)
    last = curves.tail(max(1, curves.height // 10)).drop("iteration").mean().row(0, named=True)
    return json_text({"mode": result["mode"], "iterations": curves.height,
                      "last_10pct": {k: round(v, 6) for k, v in last.items()}})


def train_history(result: dict, out: Path) -> str:
    return train_curves(result).write_csv()


def train_guards(result: dict, out: Path) -> str:
    """metrics/guards.csv: a row per logged iteration (the base's at 0, then every train.sample_every): the training
    reward since the previous row, the guard statistics (cogrpo.guards), the eval rewards, and alarm (1: it fired
    there; the reason is in the run's warning and its MLflow tag guard_alarm). Names with "/" as "_"."""
    rows = result.get("guards", [])  # a result from before the guards has none
    if not rows:
        return "iteration\n"
    frame = pl.DataFrame([{k.replace("/", "_"): (bool(v) * 1 if k == "alarm" else v) for k, v in r.items()}
                          for r in rows])
    return frame.with_columns(pl.selectors.float().round(6)).write_csv()


def learned_schedule(result: dict, out: Path) -> str:
    rows = json.loads(ModelFolder(out).schedule.read_text())["schedule"]
    return json_text([{"step": t + 1} | r for t, r in enumerate(rows)])


def benchmark_json(result: dict, out: Path) -> str:
    """metrics/benchmark.json: suite → metric → variant → steps → score, with "steps_to_base" when there is some."""
    steps = {"steps_to_base": result["steps_to_base"]} if result.get("steps_to_base") else {}
    return json_text(result["scores"] | steps)


def _markdown(table: pl.DataFrame) -> str:
    with pl.Config(tbl_formatting="MARKDOWN", tbl_hide_column_data_types=True, tbl_hide_dataframe_shape=True,
                   tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=400):
        return str(table)


def steps_saved_table(result: dict) -> pl.DataFrame | None:
    """One row per suite, headline metric and variant: the steps to reach the base's score at each base step
    count and the steps saved (tasks.benchmark.steps_to_base); None when the result has none."""
    rows = []
    for suite, metrics in result.get("steps_to_base", {}).items():
        for metric, variants in metrics.items():
            for variant, by_base in variants.items():
                grid_max = max(map(int, result["scores"][suite][metric][variant]))
                row = {"suite": suite, "metric": metric, "variant": variant}
                for t, r in by_base.items():
                    reached = r["steps"] is not None
                    row[f"steps to base@{t}"] = f"{r['steps']:.1f}" if reached else f"> {grid_max}"
                    row[f"saved @{t}"] = f"{r['saved']:.2f}×" if reached else "—"
                rows.append(row)
    return pl.DataFrame(rows) if rows else None


def benchmark_report(result: dict, out: Path) -> str:
    """reports/benchmarks.md: every suite's metrics, one row per metric and variant, one column per step count;
    then the steps saved, where the step grid holds the base's 8 or 16 steps."""
    table = pl.read_csv(out / "table.csv")
    wide = (table.with_columns(pl.col("value").round(4), pl.format("{} steps", pl.col("steps")).alias("T"))
            .pivot(on="T", index=["suite", "metric", "model", "schedule"], values="value", sort_columns=False))
    report = ("# Benchmarks\n\nWritten by the benchmark stage (`dvc repro benchmark`) from "
              "`outputs/benchmark/table.csv`: model = base (pretrained) or trained, schedule = base or learned "
              "(carried to each step count).\n\n" + _markdown(wide) + "\n")
    saved = steps_saved_table(result)
    if saved is None:
        return report
    return (report + "\n## Steps saved\n\nFor each suite's headline metric, the fewest steps at which each variant "
            "reaches the base model's (base-base) score at 8 and at 16 steps, read off its curve linearly between the "
            "step counts run (its first crossing); saved = the base's steps ÷ that. The smallest count run means at "
            "most that many; > N: not reached within the counts run.\n\n" + _markdown(saved) + "\n")
