"""The Co-GRPO training loop as one flow: rollout → score → update, iteration after iteration.

The loop reads top to bottom here, over a `TrainingSession` (tasks/train.py) that owns the trainer, the text
encoder, the reward function and the prompts, beside the reward server when a reward model is in the sum
(adapters/reward_server.py: started for the run, stopped with it); each step of an iteration is a Prefect task,
so the UI shows every iteration. State reaches disk at checkpoints (every `train.checkpoint_every` iterations
and at the end; besides them only an append-only metrics log); a rerun resumes from the newest good checkpoint
and replays the same seeds, bit for bit. With train.processes > 1 the same loop runs in that many processes under
torchrun (pipelines/train_ranks.py), each on its share of every iteration's prompts (cogrpo.core.distributed).
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from prefect import flow

from adapters import reward_server, tracking
from adapters.children import die_with_parent
from adapters.progress import Reporter, run_logger
from cogrpo.config import Params
from cogrpo.core.distributed import SINGLE, Ranks
from cogrpo.io import exclusive
from cogrpo.rewards import Term
from tasks.context import StageContext
from tasks.train import TrainingSession, co_update, grouped_rollout, save_checkpoint, score_rewards


def _varying(metrics: dict, cfg) -> dict:
    """The metrics that can vary in this run: with one inner epoch the update is on-policy (ratio 1, nothing
    clipped), and a frozen policy's knobs are constant; flat charts would only hide the ones that move."""
    flat = set()
    if cfg.inner_epochs == 1:
        flat |= {k for k in metrics if k.endswith(("/ratio_mean", "/clip_fraction"))}
    if cfg.mode == "model":
        flat |= {k for k in metrics if k.startswith("schedule/")}
    return {k: v for k, v in metrics.items() if k not in flat}


def train_stage(params: Params, inputs: dict[str, Path], out: Path, ctx: StageContext) -> dict:
    """The train stage's work (flows/stages.py): the flow below in the stage's state folder, or with
    train.processes > 1 that many processes under torchrun."""
    if params.train.processes > 1:
        return train_processes(params, inputs, out, ctx.state_dir, ctx.mlflow_run_id)
    return train(params, inputs, out, ctx.state_dir, ctx.mlflow_run_id)


@flow(name="co-grpo-train",
      flow_run_name="co-grpo · {params.train.mode} · seed {params.train.seed} · {params.schedule.steps} steps")
def train(params: Params, inputs: dict[str, Path], out: Path, state_dir: Path, run_id: str | None = None) -> dict:
    """Train from inputs["model"] (or resume from state_dir), export the model and its learned schedule to out."""
    terms = [Term.of(t) for t in params.train.rewards]
    with exclusive(state_dir), reward_server.serve(params.reward_models, terms, state_dir) as (url, served):
        reward_server.pin_models(state_dir, served)
        return loop(params, inputs, out, state_dir, run_id, url, served, as_tasks=True)


def loop(params: Params, inputs: dict[str, Path], out: Path, state_dir: Path, run_id: str | None, url: str | None,
         served: dict, as_tasks: bool, ranks: Ranks = SINGLE) -> dict:
    """The iterations, from the newest checkpoint on; each step a Prefect task (as_tasks) or a plain call (the
    processes of a torchrun training, which have no flow run). Rank 0 alone logs and writes."""
    cfg, report = params.train, Reporter()  # the iteration metrics go to MLflow below, all of them
    terms = [Term.of(t) for t in cfg.rewards]
    step = (lambda task, name: task.with_options(task_run_name=name)) if as_tasks else (lambda task, name: task.fn)
    session = TrainingSession(params, inputs, state_dir, warn=run_logger().warning, reward_url=url, ranks=ranks)
    if run_id:
        tracking.claim_training(run_id, state_dir, session.resumed_at)
        tracking.set_tags(run_id, {f"reward_model.{name}.{k}": str(v) for name, info in served.get(
            "rewards", {}).items() for k, v in info.items()})
    for it in range(session.iteration + 1, cfg.iterations + 1):
        batch = session.draw_batch()
        rollout = step(grouped_rollout, f"rollout-{it}")(session, batch)
        scores = step(score_rewards, f"score-{it}")(session, batch, rollout)
        metrics = step(co_update, f"update-{it}")(session, batch, rollout, scores)
        per_term = {f"reward/{t.label}": ranks.gather(scores[t.label]).mean().item() for t in terms}  # every rank
        if run_id:
            tracking.log_metrics(run_id, _varying(metrics, cfg) | per_term, step=it)
        if ranks.rank == 0:
            report(f"co-grpo [{cfg.mode}] iterations", it, cfg.iterations, reward_mean=metrics["reward_mean"])
        if run_id and it % cfg.sample_every == 0:
            tracking.log_image(run_id, Image.fromarray(session.sample_grid()), f"samples/iter_{it:04d}.png")
        if it % cfg.checkpoint_every == 0 or it == cfg.iterations:
            step(save_checkpoint, f"checkpoint-{it}")(session)
    return session.export(out) if ranks.rank == 0 else {}


def torchrun_command(params: Params, job: Path) -> list[str]:
    """torchrun over train.processes processes: all on this machine (--standalone), or processes / nodes on each
    of train.nodes machines meeting at train.rendezvous (the same command on every node)."""
    import sys

    cfg = params.train
    where = (["--standalone"] if cfg.nodes == 1 else
             [f"--nnodes={cfg.nodes}", "--rdzv_backend=c10d", f"--rdzv_endpoint={cfg.rendezvous}"])
    return [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc_per_node={cfg.processes // cfg.nodes}",
            "-m", "pipelines.train_ranks", str(job)]


def train_processes(params: Params, inputs: dict[str, Path], out: Path, state_dir: Path,
                    run_id: str | None = None) -> dict:
    """train.processes copies of pipelines/train_ranks.py under torchrun (one machine; see the README for several),
    beside the one reward server of the run. A process that dies ends the run with one line; the rerun resumes
    from the last checkpoint, under any number of processes."""
    import json
    import os
    import re
    import signal
    import subprocess

    from cogrpo.errors import InputError

    terms = [Term.of(t) for t in params.train.rewards]
    with exclusive(state_dir), reward_server.serve(params.reward_models, terms, state_dir) as (url, served):
        reward_server.pin_models(state_dir, served)
        job, log, result = state_dir / "processes.json", state_dir / "processes.log", state_dir / "processes_result.json"
        result.unlink(missing_ok=True)
        job.write_text(json.dumps({"params": params.model_dump(mode="json"), "out": str(out.resolve()),
                                   "inputs": {k: str(v.resolve()) for k, v in inputs.items()},
                                   "state_dir": str(state_dir.resolve()), "run_id": run_id, "url": url,
                                   "served": served, "result": str(result.resolve())}))
        command = torchrun_command(params, job.resolve())
        run_logger().info(f"training in {params.train.processes} processes: {' '.join(command)} (log: {log})")
        root = Path(__file__).resolve().parents[1]  # the processes import this checkout, whatever the working folder
        path = [str(root), str(root / "src"), os.environ.get("PYTHONPATH")]
        env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, path))}
        if params.train.nodes > 1:  # any node may hold rank 0, which logs, checkpoints and exports: hence shared
            run_logger().warning(f"waiting for the other {params.train.nodes - 1} nodes: run there, from "
                                 f"{Path.cwd()} on the shared file system, `PYTHONPATH={env['PYTHONPATH']} "
                                 f"{' '.join(['torchrun'] + command[3:])}`")
        with open(log, "w") as fh:  # its own process group, stopped whole if this run stops, and torchrun (which
            # then stops its ranks) ended by the kernel if this process is killed outright: no orphaned ranks
            proc = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                    preexec_fn=die_with_parent)
            try:
                proc.wait()
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
        if proc.returncode != 0 or not result.is_file():
            raised = re.findall(r"\b(\w+(?:Error|Exception): .*)", log.read_text(errors="replace"))
            said = [r for r in raised if not r.startswith("ChildFailedError")] or ["no exception in the log"]
            raise InputError(f"train: a training process failed (torchrun exit {proc.returncode}): {said[-1][:300]}; "
                             f"log: {log}; rerun to resume from the last checkpoint")
        return json.loads(result.read_text())
