"""Compare runs from the MLflow store: a polars table of chosen params and metrics, and a plot.

    python -m pipelines.compare                                   # modes side by side, from every run that evaluated
    python -m pipelines.compare --by train.seed --params train.lr_schedule \\
        --metrics eval.heldout.geneval.overall eval.heldout.geneval.counting --plot reports/compare_seeds.png

By default the rows are the runs that logged `eval.*`: the Prefect flow's parent runs `pipeline` (not their
nested `evaluate` runs, which say the same) and the DVC stage's runs `evaluate` (also under `dvc exp run`),
which log the same metric names. Beside the --params columns, one column `differs` names every other param whose
value differs between the rows (a param a run did not log is no difference: DVC's stage runs log only the sections
they read). The last row is the base model. The plot shows each metric's mean per value of --by, every run as a
dot (seed spread beside the difference between groups), and the base model as a dashed line. Params are named as
in params.yaml (`train.seed`; `params.train.seed` works too); a name no run logged is an error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from adapters.env import apply_defaults
from cogrpo.errors import InputError

DEFAULT_METRICS = ["eval.heldout.geneval.overall", "eval.seen.geneval.overall", "eval.heldout.dpg.score"]
DEFAULT_PARAMS = ["train.mode", "train.seed"]


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
    if kept:
        logged = set().union(*(r.data.params for r in kept))
        unknown = [p for p in params if p not in logged]
        if unknown:
            raise InputError(f"--params/--by {unknown}: no compared run logged such a param (e.g. "
                             f"{', '.join(sorted(logged)[:4])}, …)")
    differing = sorted(k for k in set().union(*(r.data.params for r in kept)) if k not in params
                       and not k.startswith("schedule.learned")
                       and len({r.data.params[k] for r in kept if k in r.data.params}) > 1)
    rows = [{"run": run.info.run_id[:8], "name": run.data.tags.get("mlflow.runName", "")}
            | {p: run.data.params.get(p) for p in params} | {m: run.data.metrics.get(m) for m in metrics}
            | {"differs": " ".join(f"{k}={run.data.params[k]}" for k in differing if k in run.data.params)}
            for run in kept]
    base = next((r for r in kept if any(k.startswith("baseline.") for k in r.data.metrics)), None)
    if base is not None:
        rows.append({"run": "", "name": "base model", "differs": ""} | {p: None for p in params}
                    | {m: base.data.metrics.get("baseline." + m.partition(".")[2]) for m in metrics})
    schema = {"run": pl.String, "name": pl.String} | {p: pl.String for p in params} | \
             {m: pl.Float64 for m in metrics} | {"differs": pl.String}
    return pl.DataFrame(rows, schema=schema)


def plot(table: pl.DataFrame, by: str, metrics: list[str], path: str) -> None:
    """Per metric: a bar per value of `by` (the mean), its runs as dots, the base model's row as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = table.filter(pl.col("name") == "base model")
    runs = table.filter(pl.col("name") != "base model")
    groups = sorted(runs[by].drop_nulls().unique().to_list())
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.5), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for i, g in enumerate(groups):
            values = runs.filter(pl.col(by) == g)[metric].drop_nulls().to_list()
            if values:
                ax.bar(i, sum(values) / len(values), color="#9ecae1")
                ax.scatter([i] * len(values), values, color="#08519c", s=14, zorder=3)
        if base.height and base[metric][0] is not None:
            ax.axhline(base[metric][0], color="#444444", linestyle="--", linewidth=1, label="base model")
            ax.legend(fontsize=8, loc="lower right")
        ax.set_xticks(range(len(groups)), groups)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel(by)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", default="metrics.`eval.heldout.geneval.overall` >= 0 AND attributes.status = 'FINISHED'",
                    help="MLflow search filter (default: every finished run that evaluated a trained model)")
    ap.add_argument("--params", nargs="*", default=DEFAULT_PARAMS)
    ap.add_argument("--metrics", nargs="+", default=DEFAULT_METRICS)
    ap.add_argument("--by", default="train.mode", help="the param that groups the summary and the plot")
    ap.add_argument("--plot", default="reports/compare.png")
    args = ap.parse_args(argv)
    by = args.by.removeprefix("params.")
    params = list(dict.fromkeys(p.removeprefix("params.") for p in [*args.params, by]))
    apply_defaults()
    from adapters import tracking

    tracking.setup()
    try:
        table = runs_table(args.filter, params, args.metrics)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    if table.is_empty():
        print(f"error: no MLflow runs match {args.filter!r}", file=sys.stderr)
        raise SystemExit(2)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=250, fmt_str_lengths=250, float_precision=3,
                   tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        print(table)
        runs = table.filter(pl.col("name") != "base model")
        summary = runs.group_by(by).agg(pl.len().alias("runs"), *[pl.col(m).mean() for m in args.metrics])
        print(summary.sort(by))
    plot(table, by, args.metrics, args.plot)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
