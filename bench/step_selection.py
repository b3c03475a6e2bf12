"""Which steps should an update train? (issue 26, item 5) `train.step_selection` random vs window vs entropy.

With train.step_fraction below 1 an update trains only some of a trajectory's T steps (the params' default trains
all of them). Each selection is trained with each seed at that fraction, params.yaml otherwise, through the
`pipeline` flow (bench/robustness.py's: the store, an MLflow parent run, the benchmark cut to the trained model at
the trained step count), and reported by its held-out GenEval-style gain over the base, its worst tag, and the
train stage's wall time per iteration (rollout, scoring and update: the train stage's MLflow run, where it was
computed; entropy's only extra cost is in the rollout).

    python bench/step_selection.py [--how random window entropy] [--seeds 0 1] [--fraction 0.5]
                                   [--out reports/step_selection]

Writes <out>.json and <out>.md after every run; an interrupted comparison, rerun, recomputes nothing it finished.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # flows/, tasks/ beside src/


def seconds_per_iteration(train_entry: Path, iterations: int) -> float | None:
    """The train stage's wall time per iteration, from the MLflow run that computed the store entry."""
    run = json.loads((train_entry / "made_by.json").read_text())["mlflow_run_id"]
    with sqlite3.connect("file:mlflow.db?mode=ro", uri=True) as con:
        row = con.execute("select start_time, end_time from runs where run_uuid = ?", (run,)).fetchone()
    return (row[1] - row[0]) / 1000 / iterations if row and row[1] else None


def run_one(how: str, seed: int, fraction: float) -> dict:
    from bench.robustness import judge, trained_pipeline

    overrides = {"train.step_fraction": fraction, "train.step_selection": how, "train.seed": seed}
    result, trained = trained_pipeline(overrides)
    entry = Path(result["stages"]["train"]["out"]).parent
    return {"how": how, "seed": seed, "mlflow_run_id": result["mlflow_run_id"],
            "s_per_iteration": seconds_per_iteration(entry, len(trained["history"]))} | judge(
        trained["history"], result["baseline"]["heldout"], result["eval"]["heldout"])


def markdown(report: dict) -> str:
    rows = report["runs"]
    lines = [f"# Step selection at step_fraction {report['fraction']}", "",
             f"`python bench/step_selection.py --fraction {report['fraction']} --how {' '.join(report['how'])} "
             f"--seeds {' '.join(map(str, report['seeds']))}`; params.yaml otherwise. Held-out GenEval-style overall at "
             "the trained step count; s/iteration: the train stage's wall time per iteration.", "",
             "| selection | seed | trained | gain | worst tag Δ | DPG Δ | reward first → last | s/iteration |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        secs = f"{r['s_per_iteration']:.2f}" if r["s_per_iteration"] else "cached"
        lines.append(f"| {r['how']} | {r['seed']} | {r['trained']:.3f} | {r['gain']:+.3f} | {r['worst_tag']} "
                     f"{r['worst_tag_delta']:+.3f} | {r['dpg_delta']:+.3f} | {r['reward_first']:.3f} → "
                     f"{r['reward_last']:.3f} | {secs} |")
    lines += ["", "| selection | mean gain | mean s/iteration |", "|---|---|---|"]
    for how in report["how"]:
        mine = [r for r in rows if r["how"] == how]
        if mine:
            timed = [r["s_per_iteration"] for r in mine if r["s_per_iteration"]]
            lines.append(f"| {how} | {sum(r['gain'] for r in mine) / len(mine):+.3f} | "
                         f"{(sum(timed) / len(timed)) if timed else float('nan'):.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--how", nargs="+", default=["random", "window", "entropy"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--fraction", type=float, default=0.5, help="train.step_fraction of every run")
    ap.add_argument("--out", default="reports/step_selection")
    args = ap.parse_args(argv)

    from adapters.env import apply_defaults

    apply_defaults()
    from adapters.prefect_api import temporary_api
    from bench.robustness import save_report

    report: dict = {"fraction": args.fraction, "how": args.how, "seeds": args.seeds, "runs": []}
    with temporary_api():
        for seed in args.seeds:
            for how in args.how:
                report["runs"].append(run_one(how, seed, args.fraction))
                save_report(args.out, report, markdown)
    print(Path(f"{args.out}.md").read_text())
    return report


if __name__ == "__main__":
    main()
