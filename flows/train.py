"""The Co-GRPO training loop as one flow: rollout → score → update, iteration after iteration.

The loop reads top to bottom here, over a `TrainingSession` (tasks/train.py) that owns the trainer, the text
encoder, the reward function and the prompts, beside the reward server when a reward model is in the sum
(adapters/reward_server.py: started for the run, stopped with it); each step of an iteration is a Prefect task,
so the UI shows every iteration. State reaches disk at checkpoints (every `train.checkpoint_every` iterations
and at the end; besides them only an append-only metrics log); a rerun resumes from the newest good checkpoint
and replays the same seeds, bit for bit. With train.processes > 1 the same loop runs in that many processes under
torchrun (adapters/torchrun.py launches pipelines/train_ranks.py), each on its share of every iteration's prompts
(cogrpo.core.distributed).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from PIL import Image
from prefect import flow

from adapters import reward_server, tracking
from adapters.progress import Reporter, run_logger
from adapters.torchrun import train_processes
from cogrpo.config import Params
from cogrpo.core.distributed import SINGLE, Ranks
from cogrpo.io import exclusive
from cogrpo.guards import STATISTICS
from cogrpo.rewards import served_terms, train_terms
from tasks.context import StageContext
from tasks.train import TrainingSession, co_update, grouped_rollout, save_checkpoint, score_rewards


# the MLflow registered model of every training's exported checkpoint; alias "best" when train.validation chose it,
# "last" otherwise: `models:/cogrpo@best`
REGISTERED_MODEL = "cogrpo"


def _varying(metrics: dict, cfg) -> dict:
    """The metrics that can vary in this run: with one inner epoch the update is on-policy (ratio 1, nothing
    clipped, and each policy's surrogate loss is −mean(advantage): one number, the same for θ and φ), and a frozen
    policy's knobs are constant; flat or duplicate charts would only hide the ones that move."""
    flat = set()
    if cfg.inner_epochs == 1:
        flat |= {k for k in metrics if k.endswith(("/ratio_mean", "/clip_fraction", "/loss"))}
    if cfg.mode == "model":
        flat |= {k for k in metrics if k.startswith("schedule/")}
    return {k: v for k, v in metrics.items() if k not in flat}


@contextlib.contextmanager
def owned(params: Params, state_dir: Path) -> Iterator[tuple[str | None, dict]]:
    """The training folder held by this process (`exclusive`: an OS lock) and the run's reward server for the
    block, its served models pinned to the folder (adapters/reward_server.py); yields the server's (URL, health)."""
    with exclusive(state_dir), reward_server.serve(params.reward_models, served_terms(params.train),
                                                   state_dir) as (url, served):
        reward_server.pin_models(state_dir, served)
        yield url, served


def train_stage(params: Params, inputs: dict[str, Path], out: Path, ctx: StageContext) -> dict:
    """The train stage's work (flows/stages.py): the flow below in the stage's state folder, or with
    train.processes > 1 that many processes under torchrun (adapters/torchrun.py), this one holding the folder
    and the reward server."""
    if params.train.processes > 1:
        with owned(params, ctx.state_dir) as (url, served):
            return train_processes(params, inputs, out, ctx.state_dir, ctx.mlflow_run_id, url, served)
    return train(params, inputs, out, ctx.state_dir, ctx.mlflow_run_id)


@flow(name="co-grpo-train",
      flow_run_name="co-grpo · {params.train.mode} · seed {params.train.seed} · {params.schedule.steps} steps")
def train(params: Params, inputs: dict[str, Path], out: Path, state_dir: Path, run_id: str | None = None) -> dict:
    """Train from inputs["model"] (or resume from state_dir), export the model and its learned schedule to out."""
    with owned(params, state_dir) as (url, served):
        return loop(params, inputs, out, state_dir, run_id, url, served, as_tasks=True)


def loop(params: Params, inputs: dict[str, Path], out: Path, state_dir: Path, run_id: str | None, url: str | None,
         served: dict, as_tasks: bool, ranks: Ranks = SINGLE) -> dict:
    """The iterations, from the newest checkpoint on; each step a Prefect task (as_tasks) or a plain call (the
    processes of a torchrun training, which have no flow run). Rank 0 alone logs and writes."""
    cfg, report = params.train, Reporter()  # the iteration metrics go to MLflow below, all of them
    terms = train_terms(cfg)
    step = (lambda task, name: task.with_options(task_run_name=name)) if as_tasks else (lambda task, name: task.fn)
    session = TrainingSession(params, inputs, state_dir, warn=run_logger().warning, reward_url=url, ranks=ranks)
    if run_id:
        tracking.claim_training(run_id, state_dir, session.resumed_at)
        tracking.set_tags(run_id, {f"reward_model.{name}.{k}": str(v) for name, info in served.get(
            "rewards", {}).items() for k, v in info.items()})
    validate = session.validating and ranks.rank == 0  # rank 0 alone chooses (it alone writes and exports)
    logs = run_id is not None and ranks.rank == 0
    if ranks.rank == 0 and session.iteration == 0:  # the guards' reference: the base's sample grid
        _guarded(session, run_id, session.sample_images())
    if validate and session.iteration == 0:  # the base, the reference of every later validation
        scores = _validation(session)
        step(save_checkpoint, "checkpoint-0")(session)
        if logs:
            tracking.log_metrics(run_id, scores, step=0, model_id=_logged_checkpoint(session, run_id))
    for it in range(session.iteration + 1, cfg.iterations + 1):
        batch = session.draw_batch()
        rollout = step(grouped_rollout, f"rollout-{it}")(session, batch)
        scores = step(score_rewards, f"score-{it}")(session, batch, rollout)
        metrics = step(co_update, f"update-{it}")(session, batch, rollout, scores)
        metrics = _varying(metrics, cfg) | {f"reward/{t.label}": ranks.gather(scores[t.label]).mean().item()
                                            for t in terms}  # the gather: every rank
        if ranks.rank == 0:
            report(f"co-grpo [{cfg.mode}] iterations", it, cfg.iterations, reward_mean=metrics["reward_mean"])
        if ranks.rank == 0 and it % cfg.sample_every == 0:  # fixed noise: the training's streams untouched
            images = session.sample_images()
            if run_id:
                tracking.log_image(run_id, Image.fromarray(session.sample_grid(images)), "samples", it)
            _guarded(session, run_id, images)
        validation_due = session.validating and it % cfg.validation.every == 0
        if validate and validation_due:
            metrics |= _validation(session)
        model_id = None
        if it % cfg.checkpoint_every == 0 or it == cfg.iterations or validation_due:
            step(save_checkpoint, f"checkpoint-{it}")(session)
            model_id = _logged_checkpoint(session, run_id) if logs else None
        if logs:  # after the checkpoint: an iteration's metrics belong to its checkpoint's logged model
            tracking.log_metrics(run_id, metrics, step=it, model_id=model_id)
    if ranks.rank != 0:
        return {}
    result = session.export(out)
    if session.validating:
        run_logger().info(f"exported iteration {result['selected_iteration']} of {cfg.iterations}, chosen by "
                          "validation (train.validation)")
    if run_id:
        tracking.register_checkpoint(session.state_dir, result["selected_iteration"], REGISTERED_MODEL,
                                     "best" if session.validating else "last")
    return result


def _guarded(session: TrainingSession, run_id: str | None, images) -> None:
    """The guards on the sample grid's images (train.guards): logged as guard/<statistic> and eval_reward/<label> at
    the session's iteration; an alarm is a warning (the Prefect run log) and the MLflow tag guard_alarm."""
    row, reason = session.guard(images)
    if run_id:
        tracking.log_metrics(run_id, {f"guard/{k}": row[k] for k in STATISTICS}
                             | {k: v for k, v in row.items() if k.startswith("eval_reward/")}, step=session.iteration)
        if reason:
            tracking.set_tags(run_id, {"guard_alarm": reason})
    if reason:
        session.warn(f"guard alarm (train.guards): {reason}")


def _validation(session: TrainingSession) -> dict[str, float]:
    """The session's current model validated (train.validation): its scores as the metrics val/<key>."""
    return {f"val/{k}": v for k, v in session.validate().items()}


def _logged_checkpoint(session: TrainingSession, run_id: str) -> str:
    """The checkpoint just written, as a model folder, logged as an MLflow logged model; returns its model_id."""
    with tempfile.TemporaryDirectory() as tmp:
        session.write_model(Path(tmp))
        return tracking.log_checkpoint(run_id, tmp, session.iteration, session.state_dir)

