"""The flows a user runs: the whole experiment (`pipeline`), one DVC stage (`stage`), one model's benchmark.

`pipeline`: every stage of flows/stages.py in order — prompt prep → tokenizer → pretrain → baseline eval →
schedule sweep → Co-GRPO (rollout → score → update, looped) → eval — each through the store, so an unchanged
rerun is all `Cached` and a changed param reruns only the stages whose key it enters. One MLflow parent run
per execution with a nested run per stage.

`stage`: what `dvc repro` runs for one stage (`python -m pipelines.stage NAME`): the same stage task on the
workspace's input folders, then its output copied from the store to the workspace path DVC tracks and its
metrics files written. Both ways share the store, so neither recomputes what the other did.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Literal

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

from adapters import tracking
from adapters.progress import run_logger
from adapters.store import materialize
from cogrpo.config import Params
from cogrpo.core.schedule import KNOBS, load_schedule, resolve_schedule
from cogrpo.io import write_text_atomic
from cogrpo.validate import load_params, with_overrides
from flows.stages import STAGES, Stage, StageRun, stage_task, track

Mode = Literal["co", "model", "schedule"]


def resolve_params(params_file: str, mode: Mode | None = None, steps: int | None = None, seed: int | None = None,
                   overrides: dict[str, Any] | None = None) -> Params:
    named = {"train.mode": mode, "schedule.steps": steps, "train.seed": seed}
    return with_overrides(load_params(params_file), {k: v for k, v in named.items() if v is not None}
                          | (overrides or {}))


def _run_stage(stage: Stage, params: Params, inputs: dict[str, Path], root: str, parent: str | None) -> StageRun:
    """One stage in its own MLflow run: the stage task, then what it made logged."""
    dumped = params.model_dump()
    sections = {s.partition(".")[0] for s in stage.params + stage.describe}
    with tracking.run(stage.name, {"stage": stage.name, "mode": params.train.mode}, parent_id=parent,
                      params={s: dumped[s] for s in sorted(sections)}) as run_id:
        run = stage_task(stage.name, params, inputs, root, run_id, return_state=True).result()
        prompts = inputs.get("prompts", run.out if stage.name == "prompts" else None)
        track(stage, run_id, run, params, prompts)
    return run


def _results_artifact(runs: dict[str, StageRun]) -> None:
    """The flow run ends with its results where the user looks: a table artifact and a log line."""
    rows = []
    for name in ("baseline", "evaluate"):
        if name in runs:
            for split, summary in runs[name].result.items():
                rows += [{"stage": name, "prompts": split, "metric": f"geneval.{k}", "value": round(v, 4)}
                         for k, v in summary["geneval"].items()]
                rows.append({"stage": name, "prompts": split, "metric": "dpg.score",
                             "value": round(summary["dpg"]["score"], 4)})
    if rows:
        create_table_artifact(rows, key="results", description="GenEval-style and DPG-style scores per stage")
    if "train" in runs:
        learned = load_schedule(runs["train"].out / "schedule.json")
        table = "| step | " + " | ".join(KNOBS) + " |\n|" + "---|" * (len(KNOBS) + 1) + "\n"
        table += "".join(f"| {t + 1} | " + " | ".join(f"{v:.3f}" for v in row) + " |\n"
                         for t, row in enumerate(learned.tolist()))
        create_markdown_artifact(f"## Learned schedule\n\n{table}\nModel and schedule: `{runs['train'].out}`",
                                 key="learned-schedule")
    for name in ("baseline", "evaluate"):
        grid = runs[name].out / "grid.png" if name in runs else None
        if grid and grid.is_file():  # small (≈10 KB): inline, so the UI shows it without a file server
            data = base64.b64encode(grid.read_bytes()).decode()
            create_markdown_artifact(f"## Samples: {name}\n\nTwo held-out prompts per tag, each row one prompt's "
                                     f"samples.\n\n![{name} samples](data:image/png;base64,{data})",
                                     key=f"samples-{name}")
    lines = [f"{r['stage']} {r['prompts']} {r['metric']} {r['value']}" for r in rows if r["metric"].endswith("overall")]
    run_logger().info("results: " + "; ".join(lines) + "; outputs under " + str(Path(next(iter(runs.values())).entry).parents[1]))


@flow(name="pipeline")
def pipeline(params_file: str = "params.yaml", mode: Mode | None = None, steps: int | None = None,
             seed: int | None = None, overrides: dict[str, Any] | None = None, root: str = "runs") -> dict:
    """Run (or find in the store) every stage. mode, steps (inference steps) and seed override params_file;
    `overrides` sets any other key, dotted: {"train.lr_schedule": 0.3}."""
    params = resolve_params(params_file, mode, steps, seed, overrides)
    tracking.setup()
    tracking.fail_dead_runs()
    runs: dict[str, StageRun] = {}
    with tracking.run("pipeline", {"mode": params.train.mode, "prefect_flow_run": str(flow_run.id)},
                      params=params.model_dump()) as parent:
        for stage in STAGES.values():
            inputs = {arg: runs[src].out for arg, src in stage.inputs.items()}
            runs[stage.name] = _run_stage(stage, params, inputs, root, parent)
        tracking.set_tags(parent, {f"key.{name}": run.key for name, run in runs.items()})
        tracking.log_metrics(parent, {"baseline": runs["baseline"].result, "eval": runs["evaluate"].result})
        tracking.log_schedule(parent, resolve_schedule(params.schedule).tolist(), "schedule.initial")
        tracking.log_schedule(parent, resolve_schedule(params.schedule, runs["train"].out / "schedule.json").tolist(),
                              "schedule.learned")
    _results_artifact(runs)
    return {"baseline": runs["baseline"].result, "eval": runs["evaluate"].result, "mlflow_run_id": parent,
            "prefect_flow_run": str(flow_run.id), "stages": {name: {"key": r.key, "cached": r.cached, "out": str(r.out)}
                                                               for name, r in runs.items()}}


@flow(name="stage", flow_run_name="stage-{name}")
def stage(name: str, params_file: str = "params.yaml", root: str = "runs") -> dict:
    """One DVC stage in the workspace: inputs from the upstream stages' workspace folders, the output copied to
    the stage's workspace folder, its metrics files written (all after the stage succeeded)."""
    params = load_params(params_file)
    spec = STAGES[name]
    inputs = {arg: Path(STAGES[src].out) for arg, src in spec.inputs.items()}
    for path in inputs.values():
        if not path.exists():
            raise FileNotFoundError(f"{path}: input of stage '{name}' not found (run `dvc repro {name}`)")
    tracking.setup()
    tracking.fail_dead_runs()
    run = _run_stage(spec, params, inputs, root, None)
    if spec.out:
        materialize(run.out, Path(spec.out))
    for path, view in spec.metrics.items():
        write_text_atomic(path, view(run.result, run.out))
    if name in ("baseline", "evaluate"):
        _results_artifact({name: run})
    return run.result


@flow(name="benchmark")
def benchmark(model_dir: str = "models/trained", schedule_file: str | None = "models/trained/schedule.json",
              prompts_file: str = "data/prompts/eval_heldout.parquet", tokenizer_dir: str = "models/tokenizer",
              steps: int | None = None, params_file: str = "params.yaml",
              overrides: dict[str, Any] | None = None) -> dict:
    """GenEval-style benchmark of one model: under schedule_file (carried to `steps` when they differ) or, without
    one, the base schedule of params at `steps`. Ends with the scores as a table artifact and a log line."""
    from adapters.progress import Reporter
    from cogrpo.benchmarks.geneval import summarize
    from tasks.evaluate import run_eval

    params = resolve_params(params_file, steps=steps, overrides=overrides)
    knobs = resolve_schedule(params.schedule, schedule_file)
    rows, _ = run_eval(params, Path(model_dir), Path(tokenizer_dir), Path(prompts_file), knobs, Reporter(),
                       f"benchmark {Path(prompts_file).stem}")
    summary = summarize(rows) | {"steps": len(knobs)}
    table = [{"metric": f"geneval.{k}", "value": round(v, 4)} for k, v in summary["geneval"].items()]
    create_table_artifact(table + [{"metric": "dpg.score", "value": round(summary["dpg"]["score"], 4)}],
                          key="benchmark", description=f"{model_dir} at {len(knobs)} steps on {prompts_file}")
    run_logger().info(f"benchmark {model_dir} at {len(knobs)} steps on {prompts_file}: "
                      f"geneval overall {summary['geneval']['overall']:.4f}, dpg {summary['dpg']['score']:.4f}")
    return summary
