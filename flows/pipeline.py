"""The whole experiment as one Prefect flow, `pipeline`, and the benchmark on its own, `benchmark`.

prompt prep → tokenizer → pretrain → baseline eval → Co-GRPO (rollout → score → update, looped) → eval.
Every stage is a task cached across runs by a content key (tasks/caching.py); its outputs live in
<root>/<stage>/<key>, its Prefect result records in <root>/cache. Rerunning unchanged params shows every
stage Cached; changing one param reruns only the stages whose key it enters. One MLflow parent run per
execution, a nested run per stage. This is the Prefect-native twin of `dvc repro`, which caches the same
stages at DVC stage granularity in the workspace folders.

From the shell: `python -m pipelines.pipeline --mode model --seed 1 --set train.lr_schedule=0.3`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from prefect import flow
from prefect.runtime import flow_run

from cogrpo.config import Params, load_params, with_overrides
from cogrpo.schedule import base_knobs, load_schedule, transfer
from tasks import tracking
from tasks.caching import ContentKey, cached
from tasks.data import write_prompt_sets, train_tokenizer
from tasks.evaluate import evaluate_schedule
from tasks.pretrain import pretrain_model
from tasks.train import TRAINING_CODE, train_model

Mode = Literal["co", "model", "schedule"]

KEYS = {
    "prompts": ContentKey(stage="prompts", sections=("world", "prompts"),
                          modules=("tasks.data", "cogrpo.prompts", "cogrpo.scenes", "cogrpo.spec", "cogrpo.io")),
    "tokenizer": ContentKey(stage="tokenizer", sections=("world", "tokenizer"), files=("prompts_dir",),
                            modules=("tasks.data", "cogrpo.tokenizer", "cogrpo.scenes", "cogrpo.benchmark")),
    "pretrain": ContentKey(stage="pretrain", sections=("world", "model", "pretrain"),
                           files=("prompts_dir", "tokenizer_dir"),
                           modules=("tasks.pretrain", "cogrpo.pretrain", "cogrpo.model", "cogrpo.text")),
    "evaluate": ContentKey(stage="evaluate", sections=("world", "eval"), values=("knobs",),
                           files=("model_dir", "tokenizer_dir", "prompts_file"),
                           modules=("tasks.evaluate", "cogrpo.benchmark", "cogrpo.sampler", "cogrpo.model",
                                    "cogrpo.checker", "cogrpo.spec")),
    "train": ContentKey(stage="train", sections=("world", "schedule", "train"),
                        files=("base_model_dir", "tokenizer_dir", "prompts_file"),
                        modules=("tasks.train",) + tuple(m.__name__ for m in TRAINING_CODE)),
}


def _params(params_file: str, mode: Mode | None, steps: int | None, seed: int | None,
            overrides: dict[str, Any] | None) -> Params:
    named = {"train.mode": mode, "schedule.steps": steps, "train.seed": seed}
    return with_overrides(load_params(params_file), {k: v for k, v in named.items() if v is not None}
                          | (overrides or {}))


def _stage(task, key: ContentKey, root: str, outputs: dict[str, str], **inputs) -> tuple[Any, dict]:
    """Run `task` cached by `key`; its outputs (argument → sub-path) go under <root>/<stage>/<key>."""
    k = key.key_for(inputs)
    paths = {arg: str(Path(root) / key.stage / k / sub) for arg, sub in outputs.items()}
    state = cached(task, key, root, all(Path(p).exists() for p in paths.values()))(
        **inputs, **paths, return_state=True)
    return state.result(), {"key": k, "cached": state.name == "Cached"} | paths


@contextlib.contextmanager
def _child(name: str, parent: str, params: Params, sections: tuple[str, ...]) -> Iterator[str]:
    """A nested MLflow run for one stage, FAILED if the stage raises."""
    run = tracking.start_run(name, {"stage": name, "mode": params.train.mode}, parent_id=parent)
    dumped = params.model_dump()
    tracking.log_params(run, {s: dumped[s] for s in sections})
    try:
        yield run
    except BaseException:
        tracking.end_run(run, failed=True)
        raise
    tracking.end_run(run)


def _note(run: str, info: dict, metrics: dict | None = None) -> None:
    tracking.set_tags(run, {"cache_key": info["key"], "cached": str(info["cached"]).lower()})
    tracking.log_metrics(run, metrics or {})


def _evaluate_both(params: Params, root: str, model_dir: str, tok: str, prompts: str, knobs: list) -> tuple:
    """Held-out (with GenEval's folder layout) and seen prompt sets under one schedule."""
    held, info = _stage(evaluate_schedule, KEYS["evaluate"], root, {"out_dir": ""}, params=params,
                        model_dir=model_dir, tokenizer_dir=tok, prompts_file=f"{prompts}/eval_heldout.parquet",
                        knobs=knobs)
    seen, _ = _stage(evaluate_schedule, KEYS["evaluate"], root, {}, params=params, model_dir=model_dir,
                     tokenizer_dir=tok, prompts_file=f"{prompts}/eval_seen.parquet", knobs=knobs)
    return {"heldout": held, "seen": seen}, info


@flow(name="pipeline")
def pipeline(params_file: str = "params.yaml", mode: Mode | None = None, steps: int | None = None,
             seed: int | None = None, overrides: dict[str, Any] | None = None,
             root: str = "runs/pipeline") -> dict:
    """Run (or find cached) every stage. mode, steps (inference steps) and seed override params_file;
    `overrides` sets any other key, dotted: {"train.lr_schedule": 0.3}."""
    params = _params(params_file, mode, steps, seed, overrides)
    tracking.setup()
    tracking.fail_dead_runs()
    parent = tracking.start_run("pipeline", {"mode": params.train.mode, "prefect_flow_run": str(flow_run.id)})
    tracking.log_params(parent, params.model_dump())
    tracking.log_schedule(parent, base_knobs(params.schedule).tolist(), "schedule.initial")
    stages: dict[str, dict] = {}
    try:
        with _child("prompts", parent, params, KEYS["prompts"].sections) as run:
            split, stages["prompts"] = _stage(write_prompt_sets, KEYS["prompts"], root, {"out_dir": ""}, params=params)
            _note(run, stages["prompts"], split)
            prompts = stages["prompts"]["out_dir"]
            for name in ("train", "eval_heldout", "eval_seen"):
                tracking.log_prompt_set(run, f"{prompts}/{name}.parquet", name)
        with _child("tokenizer", parent, params, KEYS["tokenizer"].sections) as run:
            report, stages["tokenizer"] = _stage(train_tokenizer, KEYS["tokenizer"], root, {"out_dir": ""},
                                                 params=params, prompts_dir=prompts)
            _note(run, stages["tokenizer"], report)
            tok = stages["tokenizer"]["out_dir"]
        with _child("pretrain", parent, params, KEYS["pretrain"].sections) as run:
            history, stages["pretrain"] = _stage(pretrain_model, KEYS["pretrain"], root, {"out_dir": ""},
                                                 params=params, prompts_dir=prompts, tokenizer_dir=tok, run_id=run)
            _note(run, stages["pretrain"], {"final_loss": history[-1]["loss"]} if history else {})
            base = stages["pretrain"]["out_dir"]
        with _child("baseline", parent, params, ("schedule", "eval")) as run:
            baseline, stages["baseline"] = _evaluate_both(params, root, base, tok, prompts,
                                                          base_knobs(params.schedule).tolist())
            _note(run, stages["baseline"], baseline)
        with _child("train", parent, params, ("schedule", "train")) as run:
            trained, stages["train"] = _stage(train_model, KEYS["train"], root, {"run_dir": "run", "out_dir": "model"},
                                              params=params, base_model_dir=base, tokenizer_dir=tok,
                                              prompts_file=f"{prompts}/train.parquet", mlflow_run_id=run)
            _note(run, stages["train"])
            tracking.log_prompt_set(run, f"{prompts}/train.parquet", "train")
            tracking.log_artifacts(run, trained, "trained")
            tracking.log_artifacts(run, Path(stages["train"]["run_dir"]) / "checkpoint", "checkpoint")
            learned = load_schedule(Path(trained) / "schedule.json").tolist()
            tracking.log_schedule(run, learned, "schedule.learned")
            tracking.log_schedule(parent, learned, "schedule.learned")
        with _child("evaluate", parent, params, ("schedule", "eval")) as run:
            final, stages["evaluate"] = _evaluate_both(params, root, trained, tok, prompts, learned)
            _note(run, stages["evaluate"], final)
    except BaseException:
        tracking.end_run(parent, failed=True)
        raise
    tracking.set_tags(parent, {f"key.{name}": info["key"] for name, info in stages.items()})
    tracking.log_metrics(parent, {"baseline": baseline, "eval": final})
    tracking.end_run(parent)
    return {"baseline": baseline, "eval": final, "stages": stages, "mlflow_run_id": parent,
            "prefect_flow_run": str(flow_run.id)}


@flow(name="benchmark")
def benchmark(model_dir: str = "models/trained", schedule_file: str | None = "models/trained/schedule.json",
              prompts_file: str = "data/prompts/eval_heldout.parquet", tokenizer_dir: str = "models/tokenizer",
              steps: int | None = None, params_file: str = "params.yaml",
              overrides: dict[str, Any] | None = None) -> dict:
    """GenEval-style benchmark of one model: under schedule_file (carried to `steps` when they differ) or,
    without one, the base schedule of params at `steps`."""
    params = _params(params_file, None, steps, None, overrides)
    knobs = base_knobs(params.schedule)
    if schedule_file:
        learned = load_schedule(schedule_file)
        own = base_knobs(params.schedule.model_copy(update={"steps": len(learned)}))
        knobs = learned if len(learned) == len(knobs) else transfer(learned, own, knobs)
    return evaluate_schedule(params, model_dir, tokenizer_dir, prompts_file, knobs.tolist())
