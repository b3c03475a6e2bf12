"""The flows a user runs: the whole experiment (`pipeline`), one DVC stage (`stage`), one model's benchmark, one
shard of a stage's image generation (`generate`).

`pipeline`: every stage of flows/stages.py in order — prompt prep → tokenizer → pretrain → baseline eval →
schedule sweep → Co-GRPO (rollout → score → update, looped) → eval → benchmark (variants × step counts ×
suites) — each through the store, so an unchanged
rerun is all `Cached` and a changed param reruns only the stages whose key it enters. One MLflow parent run
per execution with a nested run per stage.

`benchmark`: the benchmark stage on any model folders, with suites, step counts and variants as parameters.

`stage`: what `dvc repro` runs for one stage (`python -m pipelines.stage NAME`): the same stage task on the
workspace's input folders, then its output copied from the store to the workspace path DVC tracks and its
metrics files written. Both ways share the store, so neither recomputes what the other did.

`generate`: one shard of the baseline, evaluate or benchmark stage's images, into its state folder, for a worker
per shard; the stage then finds those batches done.
"""

from __future__ import annotations

import json

import base64
from pathlib import Path
from typing import Any, Literal

import polars as pl
from prefect import flow
from prefect.states import Failed
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

from adapters import tracking
from adapters.progress import Reporter, run_logger
from adapters.store import materialize
from cogrpo.config import Mode, Params, SuiteName, Variant
from cogrpo.core.schedule import KNOBS, load_schedule, resolve_schedule
from cogrpo.errors import InputError
from cogrpo.io import write_bytes_atomic, write_text_atomic
from cogrpo.model_folder import ModelFolder
from cogrpo.validate import load_params
from flows.stage_runs import StageRun, memoise_text_states, run_label, run_stage, state_folder
from flows.stages import STAGES
from tasks.benchmark import HEADLINE



def resolve_params(params_file: str, mode: Mode | None = None, steps: int | None = None, seed: int | None = None,
                   overrides: dict[str, Any] | None = None) -> Params:
    named = {"train.mode": mode, "schedule.steps": steps, "train.seed": seed}
    return load_params(params_file, {k: v for k, v in named.items() if v is not None} | (overrides or {}))


def _results_artifact(runs: dict[str, StageRun]) -> None:
    """The flow run ends with its results where the user looks: a table artifact and a log line."""
    rows = []
    for name in ("baseline", "evaluate"):
        if name in runs:
            for split in ("heldout", "seen"):  # (its "guards" are statistics, not scores)
                summary = runs[name].result[split]
                rows += [{"stage": name, "prompts": split, "metric": f"geneval.{k}", "value": round(v, 4)}
                         for k, v in summary["geneval"].items()]
                rows.append({"stage": name, "prompts": split, "metric": "dpg.score",
                             "value": round(summary["dpg"]["score"], 4)})
    if rows:
        create_table_artifact(rows, key="results", description="GenEval-style and DPG-style scores per stage")
    if "train" in runs:
        learned = load_schedule(ModelFolder(runs["train"].out).schedule)
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


def _bad_parameters(err: Exception):
    """The run fails with one line in its log, naming the parameter, and no traceback."""
    run_logger().error(f"bad parameters: {err}")
    return Failed(message=f"bad parameters: {err}")


def _pipeline_run_name() -> str:
    p = flow_run.parameters
    try:
        return "pipeline · " + run_label(resolve_params(p.get("params_file", "params.yaml"), p.get("mode"),
                                                        p.get("steps"), p.get("seed"), p.get("overrides")))
    except (InputError, FileNotFoundError):
        return "pipeline · bad parameters"


@flow(name="pipeline", flow_run_name=_pipeline_run_name)
def pipeline(params_file: str = "params.yaml", mode: Mode | None = None, steps: int | None = None,
             seed: int | None = None, overrides: dict[str, Any] | None = None, root: str = "runs"):
    """The whole experiment: every stage run, or found done in the store (shared with `dvc repro`).

    Args:
        params_file: the params file every other field starts from, relative to the working folder.
        mode: what Co-GRPO trains: co (model and schedule, together), alternate (model and schedule in turn,
            train.alternate), model, or schedule. Empty: train.mode of params_file.
        steps: inference steps T of the schedule. Empty: schedule.steps of params_file.
        seed: the training seed. Empty: train.seed of params_file.
        overrides: any other params key, dotted, with its value, e.g. {"train.lr_schedule": 0.3, "train.iterations":
            20}. Empty: none.
        root: the folder of the stage store and the training folders, relative to the working folder.
    """
    try:
        params = resolve_params(params_file, mode, steps, seed, overrides)
    except (InputError, FileNotFoundError) as err:
        return _bad_parameters(err)
    tracking.setup()
    tracking.fail_dead_runs()
    runs: dict[str, StageRun] = {}
    with tracking.run(f"pipeline · {run_label(params)}", {"mode": params.train.mode,
                                                          "prefect_flow_run": str(flow_run.id)},
                      params=params.model_dump()) as parent:
        for stage in STAGES.values():
            inputs = {arg: runs[src].out for arg, src in stage.inputs.items()}
            runs[stage.name] = run_stage(stage, params, inputs, root, parent)
        tracking.set_tags(parent, {f"key.{name}": run.key for name, run in runs.items()})
        tracking.log_metrics(parent, {"baseline": runs["baseline"].result, "eval": runs["evaluate"].result})
        tracking.log_schedule(parent, resolve_schedule(params.schedule).tolist(), "schedule.initial")
        learned = ModelFolder(runs["train"].out).schedule
        tracking.log_schedule(parent, resolve_schedule(params.schedule, learned).tolist(), "schedule.learned")
    _results_artifact(runs)
    return {"baseline": runs["baseline"].result, "eval": runs["evaluate"].result, "mlflow_run_id": parent,
            "prefect_flow_run": str(flow_run.id), "stages": {name: {"key": r.key, "cached": r.cached, "out": str(r.out)}
                                                               for name, r in runs.items()}}


def workspace_inputs(name: str) -> dict[str, Path]:
    """A DVC stage's inputs: the upstream stages' workspace folders, each required to exist."""
    inputs = {arg: Path(STAGES[src].out) for arg, src in STAGES[name].inputs.items()}
    for path in inputs.values():
        if not path.exists():
            raise FileNotFoundError(f"{path}: input of stage '{name}' not found (run `dvc repro {name}`)")
    return inputs


@flow(name="stage", flow_run_name="stage-{name}")
def stage(name: str, params_file: str = "params.yaml", root: str = "runs") -> dict:
    """One DVC stage in the workspace: inputs from the upstream stages' workspace folders, the output copied to
    the stage's workspace folder, its metrics files written (all after the stage succeeded)."""
    params = load_params(params_file)
    spec = STAGES[name]
    inputs = workspace_inputs(name)
    tracking.setup()
    tracking.fail_dead_runs()
    with tracking.dvc_group() as group:  # the stage runs of one `dvc repro` share a parent
        run = run_stage(spec, params, inputs, root, group)
    if spec.out:
        materialize(run.out, Path(spec.out))
    for path, view in spec.metrics.items():
        text = view(run.result, run.out)
        write_text_atomic(path, text)
        if group and path in spec.dvc_metrics:  # the experiment's parent run carries what `dvc metrics` shows
            tracking.log_metrics(group, json.loads(text))
    for path, image in spec.images.items():
        write_bytes_atomic(path, image(run.result, run.out, params))
    if name in ("baseline", "evaluate"):
        _results_artifact({name: run})
    return run.result


@flow(name="generate", flow_run_name="generate-{stage}-{shard}")
def generate(stage: Literal["baseline", "evaluate", "benchmark"], shard: int, shards: int | None = None,
             params_file: str = "params.yaml", root: str = "runs") -> dict:
    """One shard of a stage's image generation, into the stage's state folder (a worker per shard: from a Prefect
    work pool, or `python -m pipelines.generate`); the stage itself then finds those batches done and scores.

    Args:
        stage: baseline, evaluate or benchmark.
        shard: this worker's shard, 0 ≤ shard < shards: it takes every shards-th batch of prompts.
        shards: how many workers share the generation. Empty: eval.shards of params_file.
        params_file: the params file (the stage's inputs are the upstream stages' workspace folders).
        root: the store and state folders.
    """
    from tasks.cells import generate_cells

    params = load_params(params_file)
    shards = shards or params.eval.shards
    if not 0 <= shard < shards:
        raise InputError(f"shard {shard}: must be in [0, {shards})")
    spec = STAGES[stage]
    inputs = workspace_inputs(stage)
    folder = state_folder(stage, params, inputs, root)
    memoise_text_states(root)
    ran = generate_cells(params, inputs, spec.cells(params, inputs, folder), shard, shards, Reporter(), root=folder)
    run_logger().info(f"{stage} shard {shard}/{shards}: {sum(ran.values())} batches generated into {folder}")
    return {"state_folder": str(folder), "batches_generated": ran}


def _benchmark_run_name() -> str:
    p = flow_run.parameters
    what = ", ".join(p.get("suites") or []) or "params' suites"
    return f"benchmark · {p.get('trained_dir', 'models/trained')} · {what}"


@flow(name="benchmark", flow_run_name=_benchmark_run_name)
def benchmark(suites: list[SuiteName] | None = None, steps: list[int] | None = None, variants: list[Variant] | None = None,
              trained_dir: str = "models/trained", base_dir: str = "models/base", prompts_dir: str = "data/prompts",
              tokenizer_dir: str = "models/tokenizer", params_file: str = "params.yaml",
              overrides: dict[str, Any] | None = None, root: str = "runs") -> dict:
    """The benchmark stage (tasks/benchmark.py) on any trained model: each variant × step count × suite generated
    and scored, through the store (a cell generated before, by this flow, `dvc repro` or a shard worker, is not
    generated again); ends with the scores as a table artifact and a log line.

    Args:
        suites: embedded, embedded_seen, geneval, dpg, imagereward, hpsv2. Empty: benchmark.suites of params_file.
        steps: inference step counts, e.g. [2, 4, 8, 16]. Empty: benchmark.steps of params_file.
        variants: base-base, trained-base, trained-learned (model-schedule). Empty: benchmark.variants.
        trained_dir: the trained model folder (with its learned schedule.json), e.g. models/trained.
        base_dir: the base model folder it was trained from, e.g. models/base.
        prompts_dir: the embedded world's prompt sets (the embedded suite reads eval_heldout.parquet,
            embedded_seen eval_seen.parquet).
        tokenizer_dir: the tokenizer that decodes the embedded model's tokens.
        params_file: the params file every other setting comes from.
        overrides: any other params key, dotted, e.g. {"benchmark.max_prompts": 50}. Empty: none.
        root: the store and state folders.
    """
    named = {"benchmark.suites": suites, "benchmark.steps": steps, "benchmark.variants": variants}
    try:
        params = resolve_params(params_file, overrides={k: v for k, v in named.items() if v} | (overrides or {}))
        inputs = {"prompts": Path(prompts_dir), "tokenizer": Path(tokenizer_dir), "base": Path(base_dir),
                  "trained": Path(trained_dir)}
        for arg, path in inputs.items():
            if not path.exists():
                raise FileNotFoundError(f"{path}: not found ({arg}_dir)")
    except (InputError, FileNotFoundError) as err:
        return _bad_parameters(err)
    tracking.setup()
    tracking.fail_dead_runs()
    run = run_stage(STAGES["benchmark"], params, inputs, root, None)
    table = pl.read_csv(run.out / "table.csv").with_columns(pl.col("value").round(4))
    create_table_artifact(table.to_dicts(), key="benchmark",
                          description=f"{trained_dir}: {', '.join(params.benchmark.suites)} at {params.benchmark.steps} steps")
    headline = table.filter(pl.col("metric").str.split(".").list.last().is_in(HEADLINE))
    run_logger().info(f"benchmark {trained_dir}: " + "; ".join(
        f"{r['suite']} {r['metric']} {r['variant']} {r['steps']} steps {r['value']}" for r in headline.iter_rows(named=True))
        + f"; outputs in {run.out}")
    return run.result["scores"]
