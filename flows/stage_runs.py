"""A stage run: through the store (adapters/store.py), in its own MLflow run.

`stage_task` runs a stage through the store, the one cache of both ways in: a stage whose key is already there is
`Cached` in Prefect, whoever computed it; else its work runs in a context with progress reporting, its state folder
and the reward server it may ask for. `run_stage` is what the flows call: the stage task in an MLflow run of its
own, then what the stage made logged to it (`track`); a stage found in the store adds no MLflow run.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed

from adapters import reward_server, tracking
from adapters.progress import Reporter, run_logger
from adapters.store import Entry, Store, params_key, stage_key
from cogrpo.backbones.text import MEMO_ENV
from cogrpo.config import Params
from cogrpo.model_folder import ModelFolder
from flows.stages import STAGES, Stage
from tasks.context import StageContext


@dataclass(frozen=True)
class StageRun:
    """What a stage run leaves: its result, the store entry holding its outputs, and whether it was cached."""

    result: dict
    entry: str
    key: str
    cached: bool

    @property
    def out(self) -> Path:
        return Path(self.entry) / "out"


def locate(name: str, params: Params, inputs: dict[str, Path], root: str = "runs") -> Entry:
    """The store entry a stage's params, inputs and code point to (done or not)."""
    stage = STAGES[name]
    return Store(root).entry(name, stage_key(name, params_key(params, stage.params), stage.with_data(inputs),
                                             stage.modules))


def set_aside_if_damaged(name: str, entry: Entry, root: str) -> None:
    """A done entry that no longer matches its manifest (Entry.damage) is set aside with a warning naming the file,
    and so is computed again: damage in the store never reaches a result."""
    problem = entry.damage() if entry.done() else None
    if problem is None:
        return
    with contextlib.suppress(FileNotFoundError):  # another process set it aside first
        aside = Store(root).set_aside(entry)
        run_logger().warning(f"{name}: the store entry is damaged ({problem}); set aside as {aside}, computing "
                             "it again")


def state_folder(name: str, params: Params, inputs: dict[str, Path], root: str = "runs") -> Path | None:
    """The folder that outlives a crash of a resumable stage: named by its identity, the key without what a resumed
    run may change (None for a stage that is not resumable)."""
    stage = STAGES[name]
    if stage.resume_varies is None:
        return None
    return Path(root) / name / stage_key(name, params_key(params, stage.params, stage.resume_varies),
                                         stage.with_data(inputs), stage.modules)


USER_TEXT_MEMO = os.environ.get(MEMO_ENV)


def memoise_text_states(root: str) -> None:
    """Prompts' text states persist under <root>/text_states for this process and those it starts (shard workers,
    training ranks): each stage then loads no text encoder for prompts an earlier one encoded
    (cogrpo.backbones.text). A $COGRPO_TEXT_MEMO of the user's wins; set empty, it turns the memo off."""
    os.environ[MEMO_ENV] = USER_TEXT_MEMO if USER_TEXT_MEMO is not None else str((Path(root) / "text_states").resolve())


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name="{name}")
def stage_task(name: str, params: Params, inputs: dict[str, Path], root: str = "runs",
               mlflow_run_id: str | None = None):
    """Run one stage through the store: `Cached` when its key is there, else computed into it (one process at a
    time per key: a second one waits and then finds it done)."""
    stage, store = STAGES[name], Store(root)
    entry = locate(name, params, inputs, root)
    key = entry.key
    if not entry.done():
        memoise_text_states(root)
        with store.claimed(entry):
            if not entry.done():
                state_dir = state_folder(name, params, inputs, root)
                if state_dir is not None:
                    state_dir.mkdir(parents=True, exist_ok=True)
                ctx = StageContext(Reporter(mlflow_run_id), state_dir, mlflow_run_id,
                                   partial(reward_server.serve, params.reward_models, workdir=state_dir),
                                   warn=lambda message: run_logger().warning(message))
                result = store.compute(entry, lambda out: stage.work(params, inputs, out, ctx),
                                       {"mlflow_run_id": mlflow_run_id})
                return StageRun(result, str(entry.folder), key, cached=False)
    run = StageRun(entry.result(), str(entry.folder), key, cached=True)
    return Completed(name="Cached", message=f"found in the store: {entry.folder}", data=run)


def track(stage: Stage, run_id: str, run: StageRun, params: Params, inputs: dict[str, Path]) -> None:
    """Log a finished stage to its MLflow run: provenance (the sha256 of every input folder it read and of the
    output it wrote, taken after the run), the numbers of its result, its schedules, prompt sets and artifacts."""
    from cogrpo.core.schedule import base_knobs, load_schedule
    from cogrpo.io import content_hash

    tracking.set_tags(run_id, {"cache_key": run.key, "cached": str(run.cached).lower(),
                               "output.sha256": content_hash(run.out)}
                      | {f"input.{arg}.sha256": content_hash(path) for arg, path in inputs.items()})
    prompts = inputs.get("prompts", run.out if stage.name == "prompts" else None)
    tracking.log_metrics(run_id, {stage.metric_prefix or stage.name: run.result})
    if "schedule" in stage.params:
        tracking.log_schedule(run_id, base_knobs(params.schedule).tolist(), "schedule.initial")
    if ModelFolder(run.out).learned and stage.name == "train":
        tracking.log_schedule(run_id, load_schedule(ModelFolder(run.out).schedule).tolist(), "schedule.learned")
    if prompts is not None:
        for split in stage.datasets:
            tracking.log_prompt_set(run_id, prompts / f"{split}.parquet", split)
    if (run.out / "results.jsonl").is_file():
        tracking.log_results_table(run_id, run.out / "results.jsonl")
    for path, folder in stage.artifacts.items():
        target = run.out / path
        if target.is_dir():
            tracking.log_artifacts(run_id, target, folder)
        elif target.is_file():
            tracking.log_artifacts_file(run_id, target, folder)


def run_label(params: Params) -> str:
    """What a run is, in a few words: "co · seed 0 · 8 steps"."""
    return f"{params.train.mode} · seed {params.train.seed} · {params.schedule.steps} steps"


def stage_label(name: str, params: Params) -> str:
    """A stage run's name: the stage and what distinguishes its result ("train · co · seed 0 · 8 steps")."""
    if name == "train":
        return f"train · {run_label(params)}"
    if name in ("baseline", "evaluate", "schedule_sweep"):
        return f"{name} · {params.schedule.steps} steps"
    return name


def run_stage(stage: Stage, params: Params, inputs: dict[str, Path], root: str, parent: str | None) -> StageRun:
    """One stage: the stage task in its own MLflow run, then what it made logged. A stage found in the store adds
    no MLflow run and uploads nothing: the parent run (if any) links to the run that computed it."""
    label = stage_label(stage.name, params)
    task = stage_task.with_options(task_run_name=label)
    entry = locate(stage.name, params, inputs, root)
    set_aside_if_damaged(stage.name, entry, root)  # once per use: stage_task then trusts what is there
    if entry.done():
        run = task(stage.name, params, inputs, root, None, return_state=True).result()
        made = entry.made_by().get("mlflow_run_id")
        if parent:
            tracking.set_tags(parent, {f"stage.{stage.name}.cached": "true"}
                              | ({f"stage.{stage.name}.mlflow_run": made} if made else {}))
        run_logger().info(f"{label}: found in the store ({entry.folder}), computed by MLflow run {made or '?'}")
        return run
    dumped = params.model_dump()
    sections = {s.partition(".")[0] for s in stage.params + stage.describe}
    with tracking.run(label, {"stage": stage.name, "mode": params.train.mode}, parent_id=parent,
                      params={s: dumped[s] for s in sorted(sections)}) as run_id:
        run = task(stage.name, params, inputs, root, run_id, return_state=True).result()
        track(stage, run_id, run, params, inputs)
    if parent:
        tracking.set_tags(parent, {f"stage.{stage.name}.mlflow_run": run_id})
    return run
