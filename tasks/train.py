"""Tasks of the Co-GRPO training stage: grouped rollout, reward scoring, co-optimized update.

Rollouts and rewards pass between tasks as files (safetensors, parquet). The trainer's live state (θ, θ_ref,
φ, optimizers) stays in this process between tasks — reloading it every iteration would put checkpoint I/O on
the hot path — and reaches disk every `checkpoint_every` iterations, which is what a crash can lose.
The loop's tasks never persist results: Prefect would otherwise cache the second call with equal arguments.
<run_dir> holds the checkpoint, the current rollout and rewards, and history.jsonl (metrics per iteration).
"""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import torch
from prefect import task
from tqdm.auto import tqdm

import cogrpo.checker
import cogrpo.grpo
import cogrpo.model
import cogrpo.policy
import cogrpo.rewards
import cogrpo.sampler
import cogrpo.schedule
import cogrpo.spec
import cogrpo.train
from cogrpo.config import Params
from cogrpo.io import atomic_dir, exclusive, read_specs, write_text_atomic
from cogrpo.model import MDM
from cogrpo.rewards import combine
from cogrpo.scenes import World
from cogrpo.schedule import base_knobs, save_schedule
from cogrpo.text import TextEncoder
from cogrpo.tokenizer import Tokenizer
from cogrpo.train import CoGRPO, Rollout, draw_prompts, iteration_generator
from tasks import tracking


@dataclass
class Session:
    trainer: CoGRPO
    text: TextEncoder
    tokenizer: Tokenizer
    specs: list[dict]


_SESSIONS: dict[str, Session] = {}
TRAINING_CODE = (cogrpo.train, cogrpo.grpo, cogrpo.policy, cogrpo.sampler, cogrpo.schedule, cogrpo.model,
                 cogrpo.rewards, cogrpo.checker, cogrpo.spec)


def open_session(params: Params, run_dir: str, base_model_dir: str, tokenizer_dir: str, prompts_file: str) -> int:
    """Build (or resume from <run_dir>/checkpoint) the trainer of this run; return the next iteration."""
    torch.set_num_threads(params.pretrain.threads)
    model = MDM.load(base_model_dir)
    counts = [params.schedule.steps, *params.train.extra_steps]
    bases = {T: base_knobs(params.schedule.model_copy(update={"steps": T})) for T in counts}
    trainer = CoGRPO(model, bases, params.train)
    ckpt = Path(run_dir) / "checkpoint"
    stamp = ckpt / "fingerprint.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == _fingerprint(params, base_model_dir):
        trainer.load(ckpt)
    history = Path(run_dir) / "history.jsonl"
    if history.is_file():  # keep what the checkpoint covers; later iterations will be replayed
        kept = [line for line in history.read_text().splitlines() if json.loads(line)["iteration"] <= trainer.iteration]
        write_text_atomic(history, "".join(line + "\n" for line in kept))
    _SESSIONS[run_dir] = Session(trainer, TextEncoder(model.cfg.text_encoder, model.cfg.max_text_tokens),
                                 Tokenizer.load(tokenizer_dir), read_specs(prompts_file))
    return trainer.iteration


def _fingerprint(params: Params, base_model_dir: str) -> dict:
    """What a checkpoint must share with this run to be resumed: the base model, the params (the length of
    the run may change) and the training code — a rerun after a code change must not resume stale work."""
    train = params.train.model_dump(exclude={"iterations", "checkpoint_every", "sample_every"})
    base = hashlib.sha256((Path(base_model_dir) / "model.safetensors").read_bytes()).hexdigest()
    code = hashlib.sha256("".join(inspect.getsource(m) for m in TRAINING_CODE).encode()).hexdigest()
    return {"train": train, "schedule": params.schedule.model_dump(), "base_model": base, "code": code}


def _prompt_rows(s: Session) -> torch.Tensor:
    cfg = s.trainer.cfg
    gen = iteration_generator(cfg.seed, s.trainer.iteration, 0)
    return draw_prompts([x["tag"] for x in s.specs], cfg.prompts_per_iter, gen)


@task(persist_result=False)
def grouped_rollout(run_dir: str) -> str:
    """B prompts × G trajectories with one schedule action per step each → <run_dir>/rollout.safetensors."""
    s = _SESSIONS[run_dir]
    rows = _prompt_rows(s)
    emb, mask = s.text.encode([s.specs[r]["prompt"] for r in rows.tolist()])
    path = Path(run_dir) / "rollout.safetensors"
    s.trainer.rollout(emb, mask, rows).save(path)
    return str(path)


@task(persist_result=False)
def score_rewards(params: Params, run_dir: str, rollout_path: str) -> str:
    """Decode and score every trajectory → <run_dir>/rewards.parquet (one row per trajectory)."""
    s = _SESSIONS[run_dir]
    traj = Rollout.load(rollout_path).traj
    specs = [s.specs[i] for i in traj.prompt_index.tolist()]
    images = s.tokenizer.decode(traj.tokens)
    terms = [(t.name, t.weight, t.normalize) for t in params.train.rewards]
    scored = combine(terms + [("strict", 0.0, False)], World(params.world))(images, [x["prompt"] for x in specs], specs)
    path = Path(run_dir) / "rewards.parquet"
    pl.DataFrame({"prompt_row": traj.prompt_index.tolist(), "tag": [x["tag"] for x in specs],
                  "reward": scored["total"].tolist(), "correct": scored["strict"].tolist()}).write_parquet(path)
    return str(path)


@task(persist_result=False)
def co_update(run_dir: str, rollout_path: str, rewards_path: str, mlflow_run_id: str | None = None) -> dict:
    """One GRPO update of θ and/or φ; returns (and logs to MLflow) the iteration's metrics."""
    s = _SESSIONS[run_dir]
    ro, rewards = Rollout.load(rollout_path), pl.read_parquet(rewards_path)
    G = s.trainer.cfg.group_size
    rows = ro.traj.prompt_index[::G]
    emb, mask = s.text.encode([s.specs[r]["prompt"] for r in rows.tolist()])
    metrics = s.trainer.update(ro, emb, mask, torch.tensor(rewards["reward"].to_list()))
    per_tag = rewards.group_by("tag").agg(pl.col("correct").mean())
    metrics |= {f"accuracy/{t}": a for t, a in per_tag.iter_rows()}
    with open(Path(run_dir) / "history.jsonl", "a") as f:
        f.write(json.dumps({"iteration": s.trainer.iteration} | metrics) + "\n")
    if mlflow_run_id:
        tracking.log_metrics(mlflow_run_id, metrics, step=s.trainer.iteration)
    return metrics


@task(persist_result=False)
def log_samples(run_dir: str, mlflow_run_id: str, n_prompts: int = 8, samples: int = 4) -> None:
    """A grid of samples under the current deterministic schedule, for the first training prompts."""
    from cogrpo.benchmark import generate, image_grid

    s = _SESSIONS[run_dir]
    prompts = [x["prompt"] for x in s.specs[:n_prompts]]
    traj = generate(s.trainer.model, s.text, prompts, s.trainer.policy.deterministic_knobs(), samples, seed=0)
    grid = image_grid(s.tokenizer.decode(traj.tokens), cols=2 * samples)
    tracking.log_image(mlflow_run_id, grid, f"samples/iter_{s.trainer.iteration:04d}.png")


@task(persist_result=False)
def save_checkpoint(params: Params, run_dir: str, base_model_dir: str) -> str:
    """Atomically replace <run_dir>/checkpoint with the trainer's state and the params it belongs to."""
    s = _SESSIONS[run_dir]
    with atomic_dir(Path(run_dir) / "checkpoint") as tmp:
        s.trainer.save(tmp)
        (tmp / "fingerprint.json").write_text(json.dumps(_fingerprint(params, base_model_dir)))
    return str(Path(run_dir) / "checkpoint")


@task(persist_result=False)
def export_result(run_dir: str, out_dir: str) -> str:
    """The trained model and its deterministic learned schedule (plain per-step JSON) → out_dir, plus
    schedule_T<n>.json for each extra trained step count; ends the session."""
    s = _SESSIONS.pop(run_dir)
    with atomic_dir(out_dir) as tmp:
        s.trainer.model.save(tmp)
        for i, (T, knobs) in enumerate(s.trainer.learned_schedules().items()):
            save_schedule(knobs, tmp / ("schedule.json" if i == 0 else f"schedule_T{T}.json"))
        (tmp / "train.json").write_text(json.dumps({"mode": s.trainer.cfg.mode, "iterations": s.trainer.iteration}))
    return out_dir


@task
def train_model(params: Params, run_dir: str, out_dir: str, base_model_dir: str, tokenizer_dir: str,
                prompts_file: str, mlflow_run_id: str | None = None) -> str:
    """The whole training: rollout → score → update tasks, looped; a checkpoint every `checkpoint_every`
    iterations; resumes from <run_dir>/checkpoint. One run at a time may own run_dir."""
    cfg = params.train
    with exclusive(run_dir):
        start = open_session(params, run_dir, base_model_dir, tokenizer_dir, prompts_file)
        if mlflow_run_id:
            _claim(run_dir, mlflow_run_id, start)
        for it in tqdm(range(start, cfg.iterations), desc=f"co-grpo [{cfg.mode}]", initial=start,
                       total=cfg.iterations):
            rollout = grouped_rollout(run_dir)
            rewards = score_rewards(params, run_dir, rollout)
            co_update(run_dir, rollout, rewards, mlflow_run_id)
            if mlflow_run_id and (it + 1) % cfg.sample_every == 0:
                log_samples(run_dir, mlflow_run_id)
            if (it + 1) % cfg.checkpoint_every == 0 or it + 1 == cfg.iterations:
                save_checkpoint(params, run_dir, base_model_dir)
        return export_result(run_dir, out_dir)


def _claim(run_dir: str, run_id: str, start: int) -> None:
    """Tag the MLflow run with its run_dir; when resuming, link it to the run that wrote the checkpoint."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    folder = str(Path(run_dir).resolve())
    tags = {"cogrpo.run_dir": folder, "resumed_at_iteration": str(start)}
    if start > 0:
        before = client.search_runs([client.get_run(run_id).info.experiment_id],
                                    f"tags.`cogrpo.run_dir` = '{folder}'", order_by=["attributes.start_time DESC"],
                                    max_results=2)
        earlier = [r.info.run_id for r in before if r.info.run_id != run_id]
        if earlier:
            tags["resumed_from"] = earlier[0]
    for k, v in tags.items():
        client.set_tag(run_id, k, v)
