"""Compare runs from the MLflow store: a polars table of chosen params and metrics, and a plot.

    python -m pipelines.compare                                   # modes side by side, from every run that evaluated
    python -m pipelines.compare --by params.train.seed --params train.lr_schedule \\
        --metrics eval.heldout.geneval.overall eval.heldout.geneval.counting --plot reports/compare_seeds.png

By default the rows are the runs that logged `eval.*`: the Prefect flow's parent runs `pipeline` (not their
nested `evaluate` runs, which say the same) and the DVC stage's runs `evaluate` (also under `dvc exp run`),
which log the same metric names. The plot shows each metric's mean per value of --by, with
every run as a dot, so seed spread is visible next to the difference between groups.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from adapters.env import apply_defaults

DEFAULT_METRICS = ["eval.heldout.geneval.overall", "eval.seen.geneval.overall", "eval.heldout.dpg.score"]
DEFAULT_PARAMS = ["train.mode", "train.seed", "train.iterations", "train.lr_schedule", "train.sigma_init",
                  "schedule.steps"]


def runs_table(filter_string: str, params: list[str], metrics: list[str]) -> pl.DataFrame:
    """One row per distinct result: runs whose evaluation came from the same store entry (a cached rerun) are one
    row, the first; a pipeline's nested stage runs are left to their parent. Param columns: `params`, plus every
    param whose value differs between the rows (the learned schedule's values aside). The last row is the base
    model, read from the first row's baseline metrics, for reference."""
    from mlflow.tracking import MlflowClient

    from adapters import tracking

    client = MlflowClient()
    exp = client.get_experiment_by_name(tracking.EXPERIMENT)
    if exp is None:
        return pl.DataFrame()
    found = client.search_runs([exp.experiment_id], filter_string, order_by=["attributes.start_time ASC"],
                               max_results=5000)
    ids, seen, kept = {run.info.run_id for run in found}, set(), []
    for run in found:
        tags = run.data.tags
        if tags.get("mlflow.parentRunId") in ids:  # a pipeline's stage run: its parent row says the same
            continue
        result = tags.get("key.evaluate") or tags.get("cache_key")
        if result and result in seen:
            continue
        seen.add(result)
        kept.append(run)
    differing = sorted({k for k in set().union(*(r.data.params for r in kept)) if not k.startswith("schedule.learned")
                        and len({r.data.params.get(k) for r in kept}) > 1})
    columns = params + [k for k in differing if k not in params]
    rows = [{"run": run.info.run_id[:8], "name": run.data.tags.get("mlflow.runName", ""),
             "commit": run.data.tags.get("git_commit", "")[:7]}
            | {p: run.data.params.get(p) for p in columns} | {m: run.data.metrics.get(m) for m in metrics}
            for run in kept]
    base = next((r for r in kept if any(k.startswith("baseline.") for k in r.data.metrics)), None)
    if base is not None:
        rows.append({"run": "", "name": "base model", "commit": ""} | {p: None for p in columns}
                    | {m: base.data.metrics.get("baseline." + m.partition(".")[2]) for m in metrics})
    schema = {"run": pl.String, "name": pl.String, "commit": pl.String} | \
             {p: pl.String for p in columns} | {m: pl.Float64 for m in metrics}
    return pl.DataFrame(rows, schema=schema)


def plot(table: pl.DataFrame, by: str, metrics: list[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted(table[by].drop_nulls().unique().to_list())
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.5), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for i, g in enumerate(groups):
            values = table.filter(pl.col(by) == g)[metric].drop_nulls().to_list()
            if values:
                ax.bar(i, sum(values) / len(values), color="#9ecae1")
                ax.scatter([i] * len(values), values, color="#08519c", s=14, zorder=3)
        ax.set_xticks(range(len(groups)), groups)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel(by.removeprefix("params."))
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", default="metrics.`eval.heldout.geneval.overall` >= 0 AND attributes.status = 'FINISHED'",
                    help="MLflow search filter (default: every finished run that evaluated a trained model)")
    ap.add_argument("--params", nargs="*", default=DEFAULT_PARAMS)
    ap.add_argument("--metrics", nargs="+", default=DEFAULT_METRICS)
    ap.add_argument("--by", default="train.mode", help="param that groups the plot")
    ap.add_argument("--plot", default="reports/compare.png")
    args = ap.parse_args(argv)
    params = args.params + ([args.by] if args.by not in args.params else [])
    apply_defaults()
    from adapters import tracking

    tracking.setup()
    table = runs_table(args.filter, params, args.metrics)
    if table.is_empty():
        print(f"error: no MLflow runs match {args.filter!r}", file=sys.stderr)
        raise SystemExit(2)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=250, float_precision=3, tbl_hide_dataframe_shape=True):
        print(table)
        runs = table.filter(pl.col("name") != "base model")
        summary = runs.group_by(args.by).agg(pl.len().alias("runs"), *[pl.col(m).mean() for m in args.metrics])
        print(summary.sort(args.by))
    plot(table.filter(pl.col("name") != "base model"), args.by, args.metrics, args.plot)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
