"""Does the default run learn on every seed and on a perturbed machine? (issue 24, item 1)

Runs the `pipeline` flow (every stage through the store, an MLflow parent run with nested stage runs) once per case:
`train.seed` 0–4 at the params' base model, and base models pretrained with other seeds (`pretrain.seed` 1, 2), which
stand in for another CPU: its rounding gives another base model from the same recipe, and a default that needs one
particular base model is decided by float rounding. Each case must show:

  reward    mean training reward of the last 10 iterations above the first 10
  finite    every logged training metric finite (the history holds every metric the trainer logs)
  gain      held-out GenEval-style overall, trained − base, ≥ +0.05 (and ≥ +0.10 averaged over the cases)
  dpg       DPG-style score not below the base by more than 0.01
  tags      no held-out GenEval tag more than 0.10 below the base

    python bench/robustness.py [--cases train.seed=0 ... pretrain.seed=2] [--set '{"train.step_fraction": 1.0}']
                               [--out reports/robustness]

--set overrides params for every case (a candidate default before it goes into params.yaml). The benchmark stage
is cut to the trained model at the trained step count (its cells are not what is judged here). Writes <out>.json
and <out>.md after every case; an interrupted table, rerun, recomputes nothing it finished.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # flows/, tasks/ beside src/

CASES = [f"train.seed={s}" for s in range(5)] + ["pretrain.seed=1", "pretrain.seed=2"]
TAGS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
WINDOW = 10  # iterations averaged at the start and the end of the training reward


def case_overrides(case: str) -> dict:
    key, _, value = case.partition("=")
    return {key: json.loads(value)}


def judge(history: list[dict], base: dict, trained: dict) -> dict:
    """The criteria of one case from its training history and the held-out summaries of base and trained model."""
    rewards = [h["reward_mean"] for h in history]
    first, last = sum(rewards[:WINDOW]) / len(rewards[:WINDOW]), sum(rewards[-WINDOW:]) / len(rewards[-WINDOW:])
    finite = all(math.isfinite(v) for h in history for v in h.values() if isinstance(v, (int, float)))
    gain = trained["geneval"]["overall"] - base["geneval"]["overall"]
    dpg = trained["dpg"]["score"] - base["dpg"]["score"]
    tags = {t: trained["geneval"][t] - base["geneval"][t] for t in TAGS if t in base["geneval"]}
    worst = min(tags, key=tags.get)
    return {"base": base["geneval"]["overall"], "trained": trained["geneval"]["overall"], "gain": gain,
            "reward_first": first, "reward_last": last, "finite": finite, "dpg_delta": dpg, "worst_tag": worst,
            "worst_tag_delta": tags[worst], "tags": tags,
            "pass": {"reward": last > first, "finite": finite, "gain": gain >= 0.05, "dpg": dpg >= -0.01,
                     "tags": tags[worst] >= -0.10}}


def trained_pipeline(overrides: dict) -> tuple[dict, dict]:
    """The `pipeline` flow with params.yaml and `overrides`, its benchmark stage cut to the trained model at the
    trained step count (its cells are not what is judged here); returns the flow's result and the train stage's
    own (its history, guards and chosen iteration), read from its store entry."""
    from cogrpo.validate import load_params
    from flows.pipeline import pipeline

    steps = load_params("params.yaml", overrides).schedule.steps
    cut = {"benchmark.steps": [steps], "benchmark.variants": ["trained-learned"]}
    result = pipeline(overrides=overrides | cut)
    if not isinstance(result, dict):
        raise SystemExit(f"the pipeline failed for {overrides}: {result}")
    train_entry = Path(result["stages"]["train"]["out"]).parent  # the store entry: out/ and result.json
    return result, json.loads((train_entry / "result.json").read_text())


def run_case(case: str, common: dict) -> dict:
    result, trained = trained_pipeline(common | case_overrides(case))
    exported = trained.get("selected_iteration", len(trained["history"]))  # train.validation's choice, or the last
    return {"case": case, "mlflow_run_id": result["mlflow_run_id"], "exported": exported} | judge(
        trained["history"], result["baseline"]["heldout"], result["eval"]["heldout"])


def save_report(out: str, report: dict, markdown) -> None:
    """<out>.json and <out>.md (markdown(report)), rewritten whole after every run of a bench that uses the flow."""
    from cogrpo.io import write_json, write_text_atomic

    write_json(f"{out}.json", report)
    write_text_atomic(f"{out}.md", markdown(report))


def markdown(report: dict) -> str:
    rows = report["cases"]
    lines = [f"# Robustness of the default run ({len(rows)} cases)", "",
             f"`python bench/robustness.py --set '{json.dumps(report['set'])}'`; params.yaml otherwise. Held-out "
             "GenEval-style overall at the trained step count; reward: mean training reward of the first and last "
             f"{WINDOW} iterations.", "",
             "| case | exported iteration | base | trained | gain | reward first → last | DPG Δ | worst tag Δ | finite "
             "| pass |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        failed = [k for k, ok in r["pass"].items() if not ok]
        lines.append(f"| {r['case']} | {r.get('exported', '')} | {r['base']:.3f} | {r['trained']:.3f} | {r['gain']:+.3f} | "
                     f"{r['reward_first']:.3f} → {r['reward_last']:.3f} | {r['dpg_delta']:+.3f} | "
                     f"{r['worst_tag']} {r['worst_tag_delta']:+.3f} | {'yes' if r['finite'] else 'NO'} | "
                     f"{'yes' if not failed else 'no: ' + ', '.join(failed)} |")
    if rows:
        mean = sum(r["gain"] for r in rows) / len(rows)
        every = all(all(r["pass"].values()) for r in rows)
        lines += ["", f"Mean held-out gain {mean:+.3f} (goal ≥ +0.10); every case passes every check: "
                  f"{'yes' if every else 'no'}; all: {'PASS' if every and mean >= 0.10 else 'FAIL'}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=CASES, help="KEY=JSON overrides, one case each")
    ap.add_argument("--set", default="{}", help="params overrides for every case, JSON")
    ap.add_argument("--out", default="reports/robustness")
    args = ap.parse_args(argv)

    from adapters.env import apply_defaults

    apply_defaults()
    from adapters.prefect_api import temporary_api

    common = json.loads(args.set)
    report: dict = {"set": common, "cases": []}
    with temporary_api():
        for case in args.cases:
            report["cases"].append(run_case(case, common))
            save_report(args.out, report, markdown)
    print(Path(f"{args.out}.md").read_text())
    return report


if __name__ == "__main__":
    main()
