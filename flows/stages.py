"""Every stage of the pipeline, declared once: the `pipeline` flow and `dvc.yaml` both derive from STAGES.

A stage is its work — `work(params, inputs, out, ctx) → result` — the params sections it reads, the upstream
stages whose outputs it reads, the workspace folder DVC tracks as its output, and the metrics files DVC
shows, each a view of the result (flows/metrics.py: text, flows/plots.py: PNG). The code it depends on is not
listed: it is the closure of what its work's module imports (adapters.code_deps). `python -m pipelines.dvc_yaml`
writes dvc.yaml from here and a test fails when the committed file differs. flows/stage_runs.py runs a stage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cogrpo.config import Params
from cogrpo.core.schedule import KNOBS
from cogrpo.guards import STATISTICS
from flows.metrics import (benchmark_json, benchmark_report, json_text, learned_schedule, pretrain_loss, train_guards,
                           train_history, train_summary)
from flows.plots import benchmark_steps_png, pretrain_png, schedule_png, train_png
from flows.train import train_stage
from tasks.benchmark import benchmark_cells, benchmark_stage
from tasks.data import train_tokenizer, write_prompt_sets
from tasks.evaluate import eval_cells, evaluate_model, schedule_sweep
from tasks.headline import headline
from tasks.pretrain import pretrain_model


@dataclass(frozen=True)
class Stage:
    name: str
    work: Callable  # (params, inputs: {argument: folder}, out: folder, ctx: StageContext) → JSON-able result
    params: tuple[str, ...]  # params.yaml sections (or single dotted fields) it reads
    inputs: dict[str, str] = field(default_factory=dict)  # argument → the stage whose output folder it reads
    out: str | None = None  # workspace folder DVC tracks (None: the stage's result is all it makes)
    metrics: dict[str, Callable[[dict, Path], str]] = field(default_factory=dict)  # file → view(result, out)
    plots: dict[str, dict] = field(default_factory=dict)  # metrics file → DVC plot options
    dvc_metrics: tuple[str, ...] = ()  # of its metrics files, those `dvc metrics show/diff` table (all of them
    # together ≤ 200 characters wide); the others are DVC outputs kept in git: `dvc metrics show FILE` shows one
    images: dict[str, Callable[[dict, Path, Params], bytes]] = field(default_factory=dict)  # PNG plot → view
    datasets: tuple[str, ...] = ()  # prompt sets it uses (logged to MLflow as dataset inputs)
    artifacts: dict[str, str] = field(default_factory=dict)  # path inside out ("" = all) → MLflow artifact folder
    resume_varies: tuple[str, ...] | None = None  # resumable: fields a run may change and still resume
    data: tuple[str, ...] = ()  # files of the repository it reads (hashed into its key, DVC deps), e.g. prompt files
    describe: tuple[str, ...] = ()  # more params sections logged with its MLflow run, for comparing runs
    metric_prefix: str = ""  # its result's metrics are logged as <prefix>.<name> (default: the stage's name)
    cells: Callable[[Params, dict[str, Path], Path], list] | None = None  # (params, inputs, state folder) → the
    # tasks.cells.Cell its images are generated in: shardable over workers (pipelines/generate.py); needs resume_varies

    @property
    def modules(self) -> tuple[str, ...]:
        return (self.work.__module__,)

    def with_data(self, inputs: dict[str, Path]) -> dict[str, Path]:
        """Its inputs and its data files, everything whose content enters its key."""
        from adapters.code_deps import ROOT

        return inputs | {f"data:{rel}": ROOT / rel for rel in self.data}


_EVAL = {"prompts": "prompts", "tokenizer": "tokenizer"}
THREADS = "threads"  # torch's CPU threads: float reductions, so results, may depend on them
STAGES: dict[str, Stage] = {s.name: s for s in [
    Stage("prompts", write_prompt_sets, ("world", "prompts"), out="data/prompts", data=("data/train_prompts",),
          metrics={"metrics/prompts.json": lambda r, out: json_text(r)},
          datasets=("train", "eval_heldout", "eval_seen")),
    Stage("tokenizer", train_tokenizer, ("world", "tokenizer"), {"prompts": "prompts"}, out="models/tokenizer",
          metrics={"metrics/tokenizer.json": lambda r, out: json_text(r)}, artifacts={"": "tokenizer"}),
    Stage("pretrain", pretrain_model, ("world", "model", "pretrain", THREADS), {"prompts": "prompts", "tokenizer": "tokenizer"},
          out="models/base", artifacts={"": "model"}, datasets=("train",),
          metrics={"metrics/pretrain.json":
                   lambda r, out: json_text({"final_loss": r["final_loss"], "steps": r["steps"]}),
                   "metrics/pretrain_loss.csv": pretrain_loss},
          plots={"metrics/pretrain_loss.csv": {"x": "step", "y": "loss", "title": "Pretraining loss"}},
          images={"metrics/plots/pretrain.png": pretrain_png}),
    Stage("baseline", evaluate_model, ("world", "model", "schedule", "eval", THREADS), _EVAL | {"model": "pretrain"},
          out="outputs/baseline", artifacts={"grid.png": "samples"}, datasets=("eval_heldout", "eval_seen"),
          resume_varies=(), cells=eval_cells,
          metrics={"metrics/baseline.json": lambda r, out: json_text(r["heldout"]),
                   "metrics/baseline_seen.json": lambda r, out: json_text(r["seen"]),
                   "metrics/baseline_guards.json": lambda r, out: json_text(r.get("guards", {}))}),
    Stage("schedule_sweep", schedule_sweep, ("world", "model", "schedule", "eval", "sweep", THREADS),
          _EVAL | {"model": "pretrain"},
          metrics={"metrics/schedule_sweep.json": lambda r, out: json_text(r)},
          datasets=("eval_heldout",)),
    Stage("train", train_stage, ("world", "model", "pretrain", "schedule", "train", "reward_models", THREADS),
          {"prompts": "prompts", "tokenizer": "tokenizer", "model": "pretrain"},
          out="models/trained", artifacts={"": "model"}, datasets=("train",),
          resume_varies=("train.iterations", "train.processes", "train.export_mix"),  # a checkpoint resumes
          # under any process count, and a finished run exports again under another mix
          metrics={"metrics/train.json": train_summary,
                   "metrics/train_history.csv": train_history,
                   "metrics/learned_schedule.json": learned_schedule,
                   "metrics/guards.csv": train_guards},
          images={"metrics/plots/learned_schedule.png": schedule_png, "metrics/plots/train.png": train_png}),
    Stage("evaluate", evaluate_model, ("world", "model", "schedule", "eval", THREADS), _EVAL | {"model": "train"},
          out="outputs/eval", artifacts={"grid.png": "samples"}, datasets=("eval_heldout", "eval_seen"),
          resume_varies=(), cells=eval_cells,
          describe=("train",), metric_prefix="eval",
          metrics={"metrics/eval.json": lambda r, out: json_text(r["heldout"]),
                   "metrics/eval_seen.json": lambda r, out: json_text(r["seen"]),
                   "metrics/eval_guards.json": lambda r, out: json_text(r.get("guards", {}))}),
    Stage("benchmark", benchmark_stage, ("world", "model", "schedule", "eval", "benchmark", "reward_models", THREADS),
          _EVAL | {"base": "pretrain", "trained": "train"}, out="outputs/benchmark", describe=("train",),
          data=("data/benchmarks",), cells=benchmark_cells,
          # cells are generated per variant, step count and suite, so a run that adds some reuses the others
          resume_varies=("benchmark.suites", "benchmark.steps", "benchmark.variants", "benchmark.models",
                         "benchmark.geneval", "benchmark.dpg", "benchmark.hpsv2_versions", "reward_models"),
          metrics={"metrics/benchmark.json": benchmark_json,
                   "reports/benchmarks.md": benchmark_report},
          images={"metrics/plots/benchmark_steps.png": benchmark_steps_png}),
    Stage("headline", headline, (), {"baseline": "baseline", "evaluate": "evaluate", "trained": "train"},
          metrics={"metrics/headline.json": lambda r, out: json_text(r)}, dvc_metrics=("metrics/headline.json",)),
]}

# DVC's top-level plots: several metrics files or columns on one chart
PLOTS = [
    {f"schedule_{knob}": {"title": f"Learned schedule: {knob} per step", "x": "step",
                          "y": {"metrics/learned_schedule.json": [knob]}}}
    for knob in KNOBS
] + [
    {"reward_curve": {"title": "Co-GRPO training reward per iteration", "x": "iteration",
                      "y": {"metrics/train_history.csv": ["reward_mean", "reward_std"]}}},
    {"kl_curve": {"title": "KL to the base model per iteration", "x": "iteration",
                  "y": {"metrics/train_history.csv": ["model_kl"]}}},
    {"guards": {"title": "Reward-hacking guards per logged iteration (train.guards)", "x": "iteration",
                "y": {"metrics/guards.csv": list(STATISTICS)}}},
]
