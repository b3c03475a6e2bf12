"""Orchestration overhead: the same small pipeline through the `pipeline` Prefect flow (tasks, cache keys,
result records, MLflow parent and nested runs) vs the same task bodies called directly, in one process.

Both do the same compute: no sample grids (sample_every beyond the run), so the difference is Prefect
(tasks, cache keys and records) and MLflow (runs, params, metrics, datasets, artifacts). The flow runs
with a fresh root each time, so nothing is cached; the Prefect server is started once before
timing (a user who schedules from the UI has one running) and its start-up is reported on its own. The two
paths alternate, `--reps` times each, and the ratio is of the medians. Last, the first flow run is repeated
unchanged: every stage comes back Cached, and that rerun's wall time is reported too.

Writes reports/orchestration_overhead.json. Usage: python bench/orchestration_overhead.py [--reps 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks import tracking  # noqa: E402  (first: environment defaults)

import yaml  # noqa: E402

from cogrpo.config import load_params, with_overrides  # noqa: E402
from cogrpo.io import write_json  # noqa: E402
from cogrpo.schedule import base_knobs, load_schedule  # noqa: E402

SMALL = {"pretrain.steps": 200, "train.iterations": 10, "train.checkpoint_every": 5, "train.sample_every": 100,
         "prompts.eval_per_tag": 12, "prompts.dpg_eval": 24}


def direct(params, root: Path) -> None:
    """Every stage's task body, called as a plain function, in the flow's order."""
    from tasks.data import train_tokenizer, write_prompt_sets
    from tasks.evaluate import evaluate_schedule
    from tasks.pretrain import pretrain_model
    from tasks.train import co_update, export_result, grouped_rollout, open_session, save_checkpoint, score_rewards

    prompts, tok, base = str(root / "prompts"), str(root / "tokenizer"), str(root / "base")
    write_prompt_sets.fn(params, prompts)
    train_tokenizer.fn(params, prompts, tok)
    pretrain_model.fn(params, prompts, tok, base, None)
    for split in ("eval_heldout", "eval_seen"):
        evaluate_schedule.fn(params, base, tok, f"{prompts}/{split}.parquet", base_knobs(params.schedule).tolist())
    run_dir, out = str(root / "run"), str(root / "trained")
    Path(run_dir).mkdir()
    cfg = params.train
    for it in range(open_session(params, run_dir, base, tok, f"{prompts}/train.parquet"), cfg.iterations):
        rollout = grouped_rollout.fn(run_dir)
        co_update.fn(run_dir, rollout, score_rewards.fn(params, run_dir, rollout))
        if (it + 1) % cfg.checkpoint_every == 0:
            save_checkpoint.fn(params, run_dir, base)
    export_result.fn(run_dir, out)
    learned = load_schedule(f"{out}/schedule.json").tolist()
    for split in ("eval_heldout", "eval_seen"):
        evaluate_schedule.fn(params, out, tok, f"{prompts}/{split}.parquet", learned)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default="reports/orchestration_overhead.json")
    args = ap.parse_args()
    from flows.pipeline import pipeline
    from prefect import flow

    params = with_overrides(load_params(), SMALL)
    scratch = Path(tempfile.mkdtemp(prefix="overhead-", dir="runs"))
    params_file = scratch / "params.yaml"
    params_file.write_text(yaml.safe_dump(params.model_dump()))
    tracking.setup()

    start = time.perf_counter()
    flow(name="warm-up")(lambda: None)()  # starts the temporary Prefect server
    server_s = time.perf_counter() - start

    times: dict[str, list[float]] = {"direct": [], "flow": []}
    for rep in range(args.reps):
        start = time.perf_counter()
        direct(params, scratch / f"direct-{rep}")
        times["direct"].append(time.perf_counter() - start)
        start = time.perf_counter()
        pipeline(str(params_file), root=str(scratch / f"flow-{rep}"))
        times["flow"].append(time.perf_counter() - start)
        print({k: [round(x, 1) for x in v] for k, v in times.items()}, flush=True)
    start = time.perf_counter()
    again = pipeline(str(params_file), root=str(scratch / "flow-0"))  # unchanged: every stage Cached
    cached_s = time.perf_counter() - start
    assert all(stage["cached"] for stage in again["stages"].values())
    report = {"small_pipeline": SMALL, "reps": args.reps, "seconds": times, "cached_rerun_s": cached_s,
              "median_direct_s": statistics.median(times["direct"]), "median_flow_s": statistics.median(times["flow"]),
              "ratio_flow_over_direct": statistics.median(times["flow"]) / statistics.median(times["direct"]),
              "prefect_server_start_s": server_s}
    write_json(args.out, report)
    print(report)


if __name__ == "__main__":
    main()
