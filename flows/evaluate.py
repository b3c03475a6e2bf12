"""Flows of the evaluation stages: one schedule on the benchmark, or a sweep of hand-set schedules."""

from __future__ import annotations

from prefect import flow

from cogrpo.config import Params
from cogrpo.schedule import base_knobs, load_schedule
from tasks.evaluate import evaluate_schedule


@flow(name="evaluate")
def evaluate(params: Params, model_dir: str = "models/base", tokenizer_dir: str = "models/tokenizer",
             prompts_file: str = "data/prompts/eval_heldout.parquet", out_dir: str | None = None,
             schedule_file: str | None = None) -> dict:
    """GenEval-style summary of a model under the base schedule of params, or a schedule JSON file."""
    knobs = load_schedule(schedule_file) if schedule_file else base_knobs(params.schedule)
    return evaluate_schedule(params, model_dir, tokenizer_dir, prompts_file, knobs.tolist(), out_dir)


@flow(name="schedule-sweep")
def schedule_sweep(params: Params, model_dir: str = "models/base", tokenizer_dir: str = "models/tokenizer",
                   prompts_file: str = "data/prompts/eval_heldout.parquet") -> dict[str, dict]:
    """The base schedule and every hand-set schedule of params.sweep, on the same model and prompts."""
    schedules = {"base": params.schedule} | {s.name: s.apply(params.schedule) for s in params.sweep}
    return {name: evaluate_schedule.with_options(name=f"evaluate-{name}")(
                params, model_dir, tokenizer_dir, prompts_file, base_knobs(cfg).tolist())
            for name, cfg in schedules.items()}
