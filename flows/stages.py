"""Every stage of the pipeline, declared once: the `pipeline` flow and `dvc.yaml` both derive from STAGES.

A stage is its work — `work(params, inputs, out, ctx) → result` — the params sections it reads, the upstream
stages whose outputs it reads, the workspace folder DVC tracks as its output, and the metrics files DVC
shows, each a view of the result. The code it depends on is not listed: it is the closure of what its
work's module imports (adapters.code_deps). `python -m pipelines.dvc_yaml` writes dvc.yaml from here and a
test fails when the committed file differs.

`stage_task` runs a stage through the store (adapters.store), the one cache of both ways in: a stage whose
key is already there is `Cached` in Prefect, whoever computed it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed

from adapters import tracking
from adapters.progress import Reporter
from adapters.store import Entry, Store, params_key, stage_key
from cogrpo.config import Params
from flows.benchmark import benchmark_stage, report_markdown, steps_png
from flows.plots import figure, png
from flows.train import train_stage
from tasks.context import StageContext
from tasks.data import train_tokenizer, write_prompt_sets
from tasks.benchmark import benchmark_cells
from tasks.evaluate import eval_cells, evaluate_model, schedule_sweep
from tasks.headline import headline
from tasks.pretrain import pretrain_model


def _json(value) -> str:
    return json.dumps(value, indent=1) + "\n"


def _pretrain_loss(result: dict, out: Path) -> str:
    return "step,loss\n" + "".join(f"{h['step']},{h['loss']:.5f}\n" for h in result["history"])


TRAIN_CURVES = ["reward_mean", "reward_std", "zero_std_groups", "model/kl"]


def _train_curves(result: dict) -> pl.DataFrame:
    history = pl.DataFrame(result["history"])
    return history.select("iteration", *[pl.col(c).alias(c.replace("/", "_")) for c in TRAIN_CURVES
                                         if c in history.columns])


def _train_summary(result: dict, out: Path) -> str:
    curves = _train_curves(result)
    last = curves.tail(max(1, curves.height // 10)).drop("iteration").mean().row(0, named=True)
    return _json({"mode": result["mode"], "iterations": curves.height,
                  "last_10pct": {k: round(v, 6) for k, v in last.items()}})


def _learned_schedule(result: dict, out: Path) -> str:
    rows = json.loads((out / "schedule.json").read_text())["schedule"]
    return _json([{"step": t + 1} | r for t, r in enumerate(rows)])


def _schedule_png(result: dict, out: Path, params: Params) -> bytes:
    """Each knob on its own axes, learned (deterministic) against the base schedule it started from."""
    from cogrpo.core.schedule import KNOBS, base_knobs, load_schedule

    learned, base = load_schedule(out / "schedule.json"), base_knobs(params.schedule)
    fig, axes = figure(len(KNOBS), "Learned schedule per step (base dashed)")
    steps = range(1, len(learned) + 1)
    for k, (ax, knob) in enumerate(zip(axes, KNOBS)):
        ax.plot(steps, base[:, k], "--", color="grey")
        ax.plot(steps, learned[:, k], "o-", color="#08519c")
        ax.set_title(knob, fontsize=9)
        ax.set_xlabel("step")
    fig.tight_layout()
    return png(fig)


def _train_png(result: dict, out: Path, params: Params) -> bytes:
    curves = _train_curves(result)
    fig, axes = figure(2, "Co-GRPO training")
    it, mean, std = curves["iteration"], curves["reward_mean"], curves["reward_std"]
    axes[0].plot(it, mean, color="#08519c")
    axes[0].fill_between(it, mean - std, mean + std, color="#9ecae1", alpha=0.5)
    axes[0].set_title("reward (mean ± std)", fontsize=9)
    if "model_kl" in curves.columns:
        axes[1].plot(it, curves["model_kl"], color="#a63603")
    axes[1].set_title("KL to the base model", fontsize=9)
    for ax in axes:
        ax.set_xlabel("iteration")
    fig.tight_layout()
    return png(fig)


def _pretrain_png(result: dict, out: Path, params: Params) -> bytes:
    fig, axes = figure(1, "Pretraining")
    axes[0].plot([h["step"] for h in result["history"]], [h["loss"] for h in result["history"]], color="#08519c")
    axes[0].set_title("masked-token loss", fontsize=9)
    axes[0].set_xlabel("step")
    fig.tight_layout()
    return png(fig)


@dataclass(frozen=True)
class Stage:
    name: str
    work: Callable  # (params, inputs: {argument: folder}, out: folder, ctx: StageContext) → JSON-able result
    params: tuple[str, ...]  # params.yaml sections (or single dotted fields) it reads
    inputs: dict[str, str] = field(default_factory=dict)  # argument → the stage whose output folder it reads
    out: str | None = None  # workspace folder DVC tracks (None: the stage's result is all it makes)
    metrics: dict[str, Callable[[dict, Path], str]] = field(default_factory=dict)  # file → view(result, out)
    plots: dict[str, dict] = field(default_factory=dict)  # metrics file → DVC plot options
    records: tuple[str, ...] = ()  # of its metrics files, data rather than headline numbers: plot data, reports
    # (DVC outputs kept in git, not `dvc metrics`, so `dvc metrics show` stays a table of results)
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
THREADS = "pretrain.threads"  # torch's CPU threads: float reductions, so results, may depend on them
STAGES: dict[str, Stage] = {s.name: s for s in [
    Stage("prompts", write_prompt_sets, ("world", "prompts"), out="data/prompts",
          metrics={"metrics/prompts.json": lambda r, out: _json(r)}, records=("metrics/prompts.json",),
          datasets=("train", "eval_heldout", "eval_seen")),
    Stage("tokenizer", train_tokenizer, ("world", "tokenizer"), {"prompts": "prompts"}, out="models/tokenizer",
          metrics={"metrics/tokenizer.json": lambda r, out: _json(r)}, artifacts={"": "tokenizer"}),
    Stage("pretrain", pretrain_model, ("world", "model", "pretrain"), {"prompts": "prompts", "tokenizer": "tokenizer"},
          out="models/base", artifacts={"": "model"}, datasets=("train",),
          metrics={"metrics/pretrain.json": lambda r, out: _json({"final_loss": r["final_loss"], "steps": r["steps"]}),
                   "metrics/pretrain_loss.csv": _pretrain_loss},
          plots={"metrics/pretrain_loss.csv": {"x": "step", "y": "loss", "title": "Pretraining loss"}},
          images={"metrics/plots/pretrain.png": _pretrain_png}),
    Stage("baseline", evaluate_model, ("world", "model", "schedule", "eval", THREADS), _EVAL | {"model": "pretrain"},
          out="outputs/baseline", artifacts={"grid.png": "samples"}, datasets=("eval_heldout", "eval_seen"),
          resume_varies=(), cells=eval_cells,
          metrics={"metrics/baseline.json": lambda r, out: _json(r["heldout"]),
                   "metrics/baseline_seen.json": lambda r, out: _json(r["seen"])}),
    Stage("schedule_sweep", schedule_sweep, ("world", "model", "schedule", "eval", "sweep", THREADS),
          _EVAL | {"model": "pretrain"},
          metrics={"metrics/schedule_sweep.json": lambda r, out: _json(r)}, records=("metrics/schedule_sweep.json",),
          datasets=("eval_heldout",)),
    Stage("train", train_stage, ("world", "model", "schedule", "train", "reward_models", THREADS),
          {"prompts": "prompts", "tokenizer": "tokenizer", "model": "pretrain"},
          out="models/trained", artifacts={"": "model"}, datasets=("train",),
          resume_varies=("train.iterations", "train.processes"),  # a checkpoint resumes under any process count
          metrics={"metrics/train.json": _train_summary,
                   "metrics/train_history.csv": lambda r, out: _train_curves(r).write_csv(),
                   "metrics/learned_schedule.json": _learned_schedule},
          records=("metrics/learned_schedule.json", "metrics/train_history.csv"),
          images={"metrics/plots/learned_schedule.png": _schedule_png, "metrics/plots/train.png": _train_png}),
    Stage("evaluate", evaluate_model, ("world", "model", "schedule", "eval", THREADS), _EVAL | {"model": "train"},
          out="outputs/eval", artifacts={"grid.png": "samples"}, datasets=("eval_heldout", "eval_seen"),
          resume_varies=(), cells=eval_cells,
          describe=("train",), metric_prefix="eval",
          metrics={"metrics/eval.json": lambda r, out: _json(r["heldout"]),
                   "metrics/eval_seen.json": lambda r, out: _json(r["seen"])}),
    Stage("benchmark", benchmark_stage, ("world", "model", "schedule", "eval", "benchmark", "reward_models", THREADS),
          _EVAL | {"base": "pretrain", "trained": "train"}, out="outputs/benchmark", describe=("train",),
          data=("data/benchmarks",), cells=benchmark_cells,
          # cells are generated per variant, step count and suite, so a run that adds some reuses the others
          resume_varies=("benchmark.suites", "benchmark.steps", "benchmark.variants", "benchmark.geneval",
                         "benchmark.dpg", "benchmark.hpsv2_versions", "reward_models"),
          metrics={"metrics/benchmark.json": lambda r, out: _json(r["scores"]),
                   "reports/benchmarks.md": report_markdown},
          records=("reports/benchmarks.md",), images={"metrics/plots/benchmark_steps.png": steps_png}),
    Stage("headline", headline, (), {"baseline": "baseline", "evaluate": "evaluate", "trained": "train"},
          metrics={"metrics/headline.json": lambda r, out: _json(r)}),
]}

# DVC's top-level plots: several metrics files or columns on one chart
PLOTS = [
    {f"schedule_{knob}": {"title": f"Learned schedule: {knob} per step", "x": "step",
                          "y": {"metrics/learned_schedule.json": [knob]}}}
    for knob in ("ratio", "temperature", "remask_temperature", "cfg")
] + [
    {"reward_curve": {"title": "Co-GRPO training reward per iteration", "x": "iteration",
                      "y": {"metrics/train_history.csv": ["reward_mean", "reward_std"]}}},
    {"kl_curve": {"title": "KL to the base model per iteration", "x": "iteration",
                  "y": {"metrics/train_history.csv": ["model_kl"]}}},
]


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


def state_folder(name: str, params: Params, inputs: dict[str, Path], root: str = "runs") -> Path | None:
    """The folder that outlives a crash of a resumable stage: named by its identity, the key without what a resumed
    run may change (None for a stage that is not resumable)."""
    stage = STAGES[name]
    if stage.resume_varies is None:
        return None
    return Path(root) / name / stage_key(name, params_key(params, stage.params, stage.resume_varies),
                                         stage.with_data(inputs), stage.modules)


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name="{name}")
def stage_task(name: str, params: Params, inputs: dict[str, Path], root: str = "runs",
               mlflow_run_id: str | None = None):
    """Run one stage through the store: `Cached` when its key is there, else computed into it (one process at a
    time per key: a second one waits and then finds it done)."""
    stage, store = STAGES[name], Store(root)
    entry = locate(name, params, inputs, root)
    key = entry.key
    if not entry.done():
        with store.claimed(entry):
            if not entry.done():
                state_dir = state_folder(name, params, inputs, root)
                if state_dir is not None:
                    state_dir.mkdir(parents=True, exist_ok=True)
                ctx = StageContext(Reporter(mlflow_run_id), state_dir, mlflow_run_id)
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
    if (run.out / "schedule.json").is_file() and stage.name == "train":
        tracking.log_schedule(run_id, load_schedule(run.out / "schedule.json").tolist(), "schedule.learned")
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
