"""Ablation: `model`, `schedule` and `co` from the same base model at an equal rollout budget, ≥ 2 seeds,
plus an inference-step sweep of base vs learned schedules.

Needs the pipeline's base model (`dvc repro baseline` first). Each run is the real `co-grpo-train` Prefect
flow with params.yaml's train section, only mode and seed changed; every run sees the same number of
iterations × prompts × group size. A schedule learned at T steps is carried to other step counts by
interpolating its residuals over decoding progress (cogrpo.core.schedule.transfer).

Writes reports/ablation.json and reports/ablation.md.
Usage: python bench/ablation.py [--seeds 0 1] [--modes model schedule co] [--steps 2 4 8 16] [--train-steps T]
                                [--train '{"sigma_init": 0.15}'] [--out reports/NAME] [--skip-base]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

from cogrpo.core.schedule import load_schedule, resolve_schedule
from cogrpo.io import content_hash, write_json, write_text_atomic
from cogrpo.validate import load_params, with_overrides

SPLITS = {"heldout": "data/prompts/eval_heldout.parquet", "seen": "data/prompts/eval_seen.parquet"}


def evaluate_at_steps(params, model_dir: str, learned: torch.Tensor | None, steps: list[int]) -> dict:
    """Base schedule (learned None) or learned: the one trained at T (schedule_T<T>.json) if any, else the
    main one carried to T."""
    from cogrpo.benchmarks.geneval import summarize
    from tasks.evaluate import run_eval

    out = {}
    for T in steps:
        own = Path(model_dir) / f"schedule_T{T}.json"
        schedule = None if learned is None else own if own.is_file() else Path(model_dir) / "schedule.json"
        knobs = resolve_schedule(params.schedule, schedule, T)
        for split, path in SPLITS.items():
            rows, _ = run_eval(params, Path(model_dir), Path("models/tokenizer"), Path(path), knobs,
                               lambda *a, **k: None, split)
            out[f"{split}@{T}"] = summarize(rows)
    return out


def table(report: dict, steps: list[int]) -> str:
    lines = ["| run | " + " | ".join(f"held-out@{T}" for T in steps) + " | " + " | ".join(f"seen@{T}" for T in steps)
             + f" | DPG held-out@{report['train_steps']} | train reward (last 5) | wall min |",
             "|---" * (2 * len(steps) + 4) + "|"]
    for name, r in report["runs"].items():
        cells = [f"{r['eval'][f'heldout@{T}']['geneval']['overall']:.3f}" for T in steps]
        cells += [f"{r['eval'][f'seen@{T}']['geneval']['overall']:.3f}" for T in steps]
        dpg = r["eval"][f"heldout@{report['train_steps']}"]["dpg"]["score"]
        reward = f"{r['train_reward_last5']:.3f}" if "train_reward_last5" in r else "—"
        wall = f"{r['wall_minutes']:.1f}" if "wall_minutes" in r else "—"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {dpg:.3f} | {reward} | {wall} |")
    tags = [t for t in next(iter(report["runs"].values()))["eval"][f"heldout@{report['train_steps']}"]["geneval"]
            if t != "overall"]
    lines += ["", f"Per tag, held-out at {report['train_steps']} steps:", "",
              "| run | " + " | ".join(tags) + " |", "|---" * (len(tags) + 1) + "|"]
    for name, r in report["runs"].items():
        g = r["eval"][f"heldout@{report['train_steps']}"]["geneval"]
        lines.append(f"| {name} | " + " | ".join(f"{g[t]:.3f}" for t in tags) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--modes", nargs="+", default=["model", "schedule", "co"])
    ap.add_argument("--steps", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--train-steps", type=int, default=None, help="overrides schedule.steps: the T trained at")
    ap.add_argument("--train", default="{}", help="JSON overrides of the train section, e.g. '{\"sigma_init\": 0.15}'")
    ap.add_argument("--out", default="reports/ablation")
    ap.add_argument("--skip-base", action="store_true", help="do not re-evaluate the base model")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's packages beside the library
    from adapters.env import apply_defaults

    apply_defaults()
    from flows.train import train

    overrides = {f"train.{k}": v for k, v in json.loads(args.train).items()}
    if args.train_steps:
        overrides["schedule.steps"] = args.train_steps
    params = with_overrides(load_params(), overrides, "--train/--train-steps")
    torch.set_num_threads(params.pretrain.threads)
    report: dict = {"train_steps": params.schedule.steps, "iterations": params.train.iterations,
                    "rollouts_per_run": params.train.iterations * params.train.prompts_per_iter * params.train.group_size,
                    "train_overrides": json.loads(args.train), "runs": {}}
    if not args.skip_base:
        report["runs"]["base"] = {"eval": evaluate_at_steps(params, "models/base", None, args.steps)}
    for seed in args.seeds:  # seed-major: an interrupted ablation still holds every mode once
        for mode in args.modes:
            name = f"{mode}-s{seed}"
            p = with_overrides(params, {"train.mode": mode, "train.seed": seed}, name)
            # the run's folder is named by what it trains from and with, so a rerun never resumes a foreign run
            identity = hashlib.sha256((content_hash("models/base") + p.model_dump_json()).encode()).hexdigest()[:12]
            folder = Path("runs/ablation", Path(args.out).name, f"{name}-{identity}")
            run_dir, out_dir = folder / "run", folder / "model"
            inputs = {"prompts": Path("data/prompts"), "tokenizer": Path("models/tokenizer"), "model": Path("models/base")}
            run_dir.mkdir(parents=True, exist_ok=True)
            out_dir.mkdir(parents=True, exist_ok=True)
            start = time.monotonic()
            history = train(p, inputs, out_dir, run_dir)["history"]
            wall = (time.monotonic() - start) / 60
            learned = load_schedule(Path(out_dir) / "schedule.json")
            report["runs"][name] = {"mode": mode, "seed": seed, "wall_minutes": wall,
                                    "train_reward_last5": sum(h["reward_mean"] for h in history[-5:]) / len(history[-5:]),
                                    "learned_schedule": learned.tolist(),
                                    "eval": evaluate_at_steps(p, out_dir, learned, args.steps)}
            write_json(f"{args.out}.json", report)  # partial results survive an interruption
    write_json(f"{args.out}.json", report)
    write_text_atomic(f"{args.out}.md", table(report, args.steps))
    print(table(report, args.steps))


if __name__ == "__main__":
    main()
