"""DVC stage `train`: Co-GRPO from the base model → models/trained (model + learned schedule JSON).

Resumes from runs/train/checkpoint when a previous run was interrupted (DVC keeps it: persist). Writes the
learned schedule (metrics/learned_schedule.json), the per-iteration curves (metrics/train_history.csv) and
the last iterations' means (metrics/train.json) for `dvc plots` and `dvc metrics`.
"""

from cogrpo.io import write_json, write_text_atomic
from pipelines._stage import run_stage

CURVES = ["reward_mean", "reward_std", "zero_std_groups", "model/kl", "schedule/ratio_mean"]


def main() -> None:
    import json
    from pathlib import Path

    import polars as pl

    from flows.train import train
    from tasks import tracking

    def body(params, run_id):
        out = train(params, mlflow_run_id=run_id)
        tracking.log_artifacts(run_id, out, "trained")
        rows = json.loads((Path(out) / "schedule.json").read_text())["schedule"]
        write_json("metrics/learned_schedule.json", [{"step": t + 1} | r for t, r in enumerate(rows)])
        tracking.log_schedule(run_id, [list(r.values()) for r in rows], "schedule.learned")
        history = pl.read_ndjson("runs/train/history.jsonl")
        curves = history.select("iteration", *[pl.col(c).alias(c.replace("/", "_")) for c in CURVES
                                               if c in history.columns])
        write_text_atomic("metrics/train_history.csv", curves.write_csv())
        last = curves.tail(max(1, curves.height // 10)).drop("iteration").mean().row(0, named=True)
        write_json("metrics/train.json", {"mode": params.train.mode, "iterations": curves.height,
                                          "last_10pct": {k: round(v, 6) for k, v in last.items()}})
        return {"train": last}

    run_stage("train", ["train", "schedule"], body, datasets=("train",))


if __name__ == "__main__":
    main()
