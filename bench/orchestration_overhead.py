"""Orchestration overhead: the same small pipeline through the `pipeline` Prefect flow (tasks, store keys and
entries, MLflow parent and nested runs) vs the same stage work called directly, in one process.

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

import yaml

from cogrpo.io import write_json
from cogrpo.validate import load_params

SMALL = {"pretrain.steps": 200, "train.iterations": 10, "train.checkpoint_every": 5, "train.sample_every": 100,
         "prompts.eval_per_tag": 12, "prompts.dpg_eval": 24}


def direct(params, root: Path) -> None:
    """Every stage's work called as a plain function, in the flow's order; the training loop without tasks."""
    from flows.stages import STAGES
    from tasks.context import StageContext
    from tasks.train import TrainingSession

    outs: dict[str, Path] = {}
    for stage in STAGES.values():
        out = outs[stage.name] = root / stage.name
        out.mkdir(parents=True)
        inputs = {arg: outs[src] for arg, src in stage.inputs.items()}
        if stage.name != "train":
            state = root / "state" / stage.name if stage.resume_varies is not None else None
            stage.work(params, inputs, out, StageContext(state_dir=state))
            continue
        session = TrainingSession(params, inputs, root / "state", print)
        for it in range(session.iteration + 1, params.train.iterations + 1):
            batch = session.draw_batch()
            rollout = session.trainer.rollout(batch)
            session.update(batch, rollout, session.score(batch, rollout))
            if it % params.train.checkpoint_every == 0:
                session.save_checkpoint()
        session.export(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default="reports/orchestration_overhead.json")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's packages beside the library
    from adapters.env import apply_defaults

    apply_defaults()
    from prefect import flow

    from adapters import tracking
    from flows.pipeline import pipeline

    params = load_params("params.yaml", SMALL)
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
