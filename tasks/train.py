"""The Co-GRPO training session and the steps of one iteration as Prefect tasks.

`TrainingSession` owns everything a run holds between iterations: the trainer (θ, θ_ref, φ, optimizers), the
generator (its text encoder encodes the prompts, its decoder turns tokens into images), the reward function and
the training prompts. It lives in the process that runs the loop (flows/train.py); nothing is written and read
back between the steps of an iteration. The session's state folder holds:
    <state_dir>/checkpoints/<iteration>/   trained weights, schedule policy, optimizers, history, validations and
                                           guard rows (manifest last); the KL reference is the input model, rebuilt
                                           at resume
    <state_dir>/history.jsonl              an append-only log of every iteration's metrics, for the eye (tail it);
                                           never read back: a resumed run takes its history from the checkpoint
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from prefect import task
from prefect.cache_policies import NO_CACHE

from cogrpo.backbones.loading import load_generator
from cogrpo.backbones.pretrain import masked_token_loss
from cogrpo.config import Params
from cogrpo.core import checkpoints
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.distributed import SINGLE, Ranks
from cogrpo.core.policy import save_conditioned_policy
from cogrpo.core.sampler import Trajectory
from cogrpo.core.schedule import base_knobs, save_schedule
from cogrpo.core.selection import regressions, select_checkpoint, validation_rows
from cogrpo.core.trainer import CoGRPO, Rollout, draw_prompts, iteration_generator
from cogrpo.errors import InputError
from cogrpo.guards import alarm, statistics
from cogrpo.images import captioned_grid
from cogrpo.io import read_specs
from cogrpo.model_folder import ModelFolder
from cogrpo.rewards import Term, combine, eval_terms, term_values, term_weights, train_terms
from cogrpo.shares import per_process
from cogrpo.world.checker import Checker
from cogrpo.world.scenes import World
from tasks.data import training_prompts
from tasks.pretrain import pretraining_data


def pretraining_anchor(params: Params, inputs: dict[str, Path], generator) -> Callable[[torch.Generator], torch.Tensor]:
    """The embedded MDM's pretraining loss on the pretraining stage's own data, for train.anchor_coef."""
    pool, text = pretraining_data(params, inputs["prompts"], generator.tokenizer, generator.text)
    return partial(masked_token_loss, generator.model, text, pool, params.train.anchor_batch,
                   params.pretrain.cond_dropout)


class TrainingSession:
    def __init__(self, params: Params, inputs: dict[str, Path], state_dir: Path, warn: Callable[[str], None],
                 reward_url: str | None = None, ranks: Ranks = SINGLE):
        """Build the run from the base model, or resume it from the newest good checkpoint at or before
        train.iterations (a checkpoint past it belongs to a longer run of the same identity). reward_url: the
        reward server that scores the served reward terms (imagereward, hpsv2, clip), if any. ranks: this
        process's place in a data-parallel run (each rank rolls out its share of the prompts; rank 0 alone
        writes); a checkpoint does not depend on the number of ranks that wrote it."""
        cfg = self.cfg = params.train
        self.ranks, self.warn = ranks, warn
        if ranks.world > 1:  # the ranks share the machine's cores (set before the session sets its own below)
            params = params.model_copy(update={"threads": max(1, params.threads // ranks.world)})
        per_process(cfg.prompts_per_iter, ranks.world, "train.prompts_per_iter")  # whole groups per rank, or refused
        torch.set_num_threads(params.threads)
        source = self.prompt_file = training_prompts(inputs["prompts"])
        self.specs = read_specs(source)
        if cfg.prompts_per_iter > len(self.specs):
            raise InputError(f"train.prompts_per_iter = {cfg.prompts_per_iter} exceeds the {len(self.specs)} "
                             f"training prompts of {source}")
        self.generator = load_generator(params.model, inputs, params.world)
        bases = {T: base_knobs(params.schedule.model_copy(update={"steps": T}))
                 for T in [params.schedule.steps, *cfg.extra_steps]}
        anchor = None
        if cfg.anchor_coef and params.model.backbone != "embedded":  # a downloaded model's pretraining data is not here
            warn(f"train.anchor_coef {cfg.anchor_coef}: model.backbone {params.model.backbone} has no pretraining loss "
                 "here; training without the anchor")
            cfg = cfg.model_copy(update={"anchor_coef": 0.0})
        elif cfg.anchor_coef:
            anchor = pretraining_anchor(params, inputs, self.generator)
        self.trainer = CoGRPO(self.generator, bases, cfg, ranks, anchor)
        self.terms = train_terms(cfg)
        self.failures: dict[str, str] = {}  # this iteration's optional terms that failed: label → reason
        scored = self.terms + [Term("strict", 0.0)]  # strict: accuracy per tag
        self.reward = combine(scored, World(params.world), reward_url, params.reward_models.request_timeout_s,
                              on_failure=self.failures.__setitem__)
        self.eval_terms = eval_terms(cfg)  # watched, never trained on: a failure of an optional one warns here
        self.eval_reward = combine(self.eval_terms, World(params.world), reward_url,
                                   params.reward_models.request_timeout_s,
                                   on_failure=lambda label, why: warn(f"eval reward {label} scored 0: {why}")
                                   ) if self.eval_terms else None
        self.guard_rows: list[dict] = []  # per logged iteration: reward, guard statistics, eval rewards, alarm
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        self.history: list[dict] = []
        self.validations: dict[int, dict[str, float]] = {}  # iteration → validation summary (train.validation)
        self.checker = Checker(World(params.world))
        ckpt = checkpoints.latest_good(state_dir / "checkpoints", cfg.iterations, warn)
        if ckpt is not None:
            self.trainer.load(ckpt)
            checkpoints.require_finite(self.trained_weights(), str(ckpt / "model"))
            self.history = [json.loads(line) for line in (ckpt / "history.jsonl").read_text().splitlines()]
            if (ckpt / "validations.json").exists():
                self.validations = {int(i): v for i, v in json.loads((ckpt / "validations.json").read_text()).items()}
            if (ckpt / "guards.json").exists():  # a checkpoint written before the guards has none
                self.guard_rows = json.loads((ckpt / "guards.json").read_text())
        self.resumed_at = self.iteration
        if ranks.rank == 0:
            (state_dir / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in self.history))

    @property
    def iteration(self) -> int:
        return self.trainer.iteration

    def trained_weights(self):
        return [(f"trained[{i}]", p) for i, p in enumerate(self.generator.trainable_parameters())]

    def draw_batch(self) -> GroupedBatch:
        """This iteration's prompts (tag-balanced, seeded by (seed, iteration)) with their encodings: this rank's
        share of them."""
        gen = iteration_generator(self.cfg.seed, self.iteration, 0)
        rows = draw_prompts([s["tag"] for s in self.specs], self.cfg.prompts_per_iter, gen)
        rows = rows[self.ranks.share(len(rows))]
        cond = self.generator.encode([self.specs[r]["prompt"] for r in rows.tolist()])
        return GroupedBatch(rows, cond, self.cfg.group_size)

    def score(self, batch: GroupedBatch, rollout: Rollout) -> dict[str, torch.Tensor]:
        """Decode every trajectory and score it: {"total": (B·G,), "strict": …, <each reward term>: …,
        "failed/<label>" of each optional term: …}."""
        specs = [self.specs[r] for r in batch.trajectory_rows().tolist()]
        images = self.generator.decode(rollout.traj.tokens)
        return self.reward(images, [s["prompt"] for s in specs], specs)

    def update(self, batch: GroupedBatch, rollout: Rollout, scores: dict[str, torch.Tensor]) -> dict:
        """The GRPO update; returns the iteration's metrics (also appended to history.jsonl)."""
        metrics = self.trainer.update(batch, rollout, term_values(self.terms, scores), term_weights(self.terms))
        if metrics["skipped"] and self.ranks.rank == 0:
            self.warn(f"iteration {self.iteration}: {int(metrics['skipped'])} of {self.cfg.inner_epochs} update "
                      f"passes skipped, non-finite {'; '.join(self.trainer.skip_reasons)} (metric 'skipped')")
        for term in self.terms:
            if not term.required:
                metrics[f"reward/{term.label}_failed"] = self.ranks.gather(scores[f"failed/{term.label}"]).mean().item()
        if self.failures:  # this rank's scoring failed: it warns (the metrics count every rank's)
            metric_names = ", ".join(f"reward/{label}_failed" for label in self.failures)
            self.warn(f"iteration {self.iteration}: optional reward terms scored 0 where they failed: "
                      f"{'; '.join(self.failures.values())} (metrics {metric_names})")
            self.failures.clear()
        tags = [self.specs[r]["tag"] for r in self.ranks.gather(batch.trajectory_rows()).tolist()]
        correct = self.ranks.gather(scores["strict"]).tolist()
        for tag in sorted(set(tags)):
            hits = [c for c, t in zip(correct, tags) if t == tag]
            metrics[f"accuracy/{tag}"] = sum(hits) / len(hits)
        record = {"iteration": self.iteration} | metrics
        self.history.append(record)
        if self.ranks.rank == 0:
            with open(self.state_dir / "history.jsonl", "a") as fh:
                fh.write(json.dumps(record) + "\n")
        return metrics

    @property
    def validating(self) -> bool:
        return self.cfg.validation.every > 0

    def validate(self) -> dict[str, float]:
        """Score the current model under its learned schedule (π_φ's mean) on the validation prompts and record it
        for this iteration: {"overall", <tag>…, "dpg"}, the checker's GenEval-style summary."""
        from cogrpo.benchmarks.geneval import sample_policy_batch, score, summarize

        v, gen, policy = self.cfg.validation, self.generator, self.trainer.policy
        specs = [self.specs[r] for r in validation_rows([s["tag"] for s in self.specs], v.prompts_per_tag, v.seed)]
        prompts = [s["prompt"] for s in specs]
        with torch.no_grad():  # a per-step policy reads no prompt: its schedule is the same for each
            traj = Trajectory.cat([sample_policy_batch(gen, prompts[i:i + 64], i, policy.base, v.samples, v.seed,
                                                       policy) for i in range(0, len(prompts), 64)])
        summary = summarize(score(self.checker, gen.decode(traj.tokens), specs, traj.prompt_index))
        result = summary["geneval"] | {"dpg": summary["dpg"]["score"]}
        self.validations[self.iteration] = result
        return result

    def selected_iteration(self) -> int:
        """The checkpoint to export (cogrpo.core.selection); the last iteration when validation is off."""
        if not self.validating:
            return self.iteration
        return select_checkpoint({i: v for i, v in self.validations.items() if i <= self.iteration},
                                 self.cfg.validation.tolerance)

    GRID_PROMPTS, GRID_SAMPLES = 8, 4  # the sample grid: the first training prompts, samples of each

    def sample_images(self):
        """The sample grid's images (n, H, W, 3) uint8, prompt-major: GRID_SAMPLES of each of the first GRID_PROMPTS
        training prompts under the current deterministic schedule, with fixed noise (seed 0, generators of their
        own: the training's random streams are not touched), decoded as the evaluation decodes: at π_φ's mean, a
        conditioned policy's for each prompt."""
        from cogrpo.benchmarks.geneval import sample_policy_batch

        prompts, policy = [s["prompt"] for s in self.specs[:self.GRID_PROMPTS]], self.trainer.policy
        with torch.no_grad():
            traj = sample_policy_batch(self.generator, prompts, 0, policy.deterministic_knobs(), self.GRID_SAMPLES, 0,
                                       policy if policy.conditioned else None)
        return self.generator.decode(traj.tokens)

    def sample_grid(self, images=None):
        """The sample grid (sample_images, or the images given) as one image: a row per prompt, captioned with it."""
        images = self.sample_images() if images is None else images
        H, W = images.shape[1:3]
        prompts = [s["prompt"] for s in self.specs[:self.GRID_PROMPTS]]
        return captioned_grid(images.reshape(len(prompts), self.GRID_SAMPLES, H, W, 3), prompts, None,
                              f"iteration {self.iteration}: {self.GRID_SAMPLES} samples of each prompt, fixed noise, "
                              "the schedule at its mean", scale=max(1, 144 // H))

    def _fill_guard_rewards(self) -> None:
        """Each guard row's training reward: the mean reward_mean of the iterations since the previous row (the
        base's row, at iteration 0: iteration 1's, the base's own rollouts), once they are done."""
        for k, row in enumerate(self.guard_rows):
            if row["reward"] is None:
                lo, hi = (self.guard_rows[k - 1]["iteration"] if k else 0), max(row["iteration"], 1)
                window = [h["reward_mean"] for h in self.history if lo < h["iteration"] <= hi]
                row["reward"] = sum(window) / len(window) if window else None

    def guard(self, images=None) -> tuple[dict, str | None]:
        """The guards at the current iteration (cogrpo.guards, train.guards) on the sample grid's images (drawn here
        when not given): the row {"iteration", "reward", <statistic>…, "eval_reward/<label>"…, "alarm"}, recorded,
        and the alarm's reason (None: quiet)."""
        images = self.sample_images() if images is None else images
        row = {"iteration": self.iteration, "reward": None} | statistics(images, self.GRID_SAMPLES)
        if self.eval_terms:
            specs = [s for s in self.specs[:self.GRID_PROMPTS] for _ in range(self.GRID_SAMPLES)]
            scores = self.eval_reward(images, [s["prompt"] for s in specs], specs)
            row |= {f"eval_reward/{t.label}": scores[t.label].mean().item() for t in self.eval_terms}
        self.guard_rows = [r for r in self.guard_rows if r["iteration"] < self.iteration] + [row]
        self._fill_guard_rewards()
        g = self.cfg.guards
        row["alarm"] = alarm(self.guard_rows, g.bands(), g.reward_rise, g.eval_reward) or ""
        return row, row["alarm"] or None

    def save_checkpoint(self) -> Path:
        """A diverged model (NaN or inf weights) stops the run here, before it can become a checkpoint. Rank 0
        writes it (every rank holds the same state)."""
        checkpoints.require_finite(self.trained_weights(), f"iteration {self.iteration}'s model")
        if self.ranks.rank != 0:
            return self.state_dir / "checkpoints" / f"{self.iteration:06d}"

        def fill(folder: Path) -> None:
            self.trainer.save(folder)
            (folder / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in self.history))
            (folder / "validations.json").write_text(json.dumps(self.validations))
            (folder / "guards.json").write_text(json.dumps(self.guard_rows))

        protect = [self.selected_iteration()] if self.validating else []
        return checkpoints.save(self.state_dir / "checkpoints", self.iteration, fill, protect=protect)

    def write_model(self, out: Path) -> ModelFolder:
        """The current model as a model folder (cogrpo.model_folder) → out: the generator's trained weights, its
        learned schedule (plain per-step JSON, one file per trained step count), a prompt- or state-conditioned
        policy whole."""
        self.generator.save_trained(out)
        folder = ModelFolder(out)
        for i, (T, knobs) in enumerate(self.trainer.learned_schedules().items()):
            save_schedule(knobs, folder.schedule if i == 0 else folder.schedule_at(T))
        policy = self.trainer.policy
        if policy.conditioned:  # the per-prompt (and per-state) part beside the per-step one
            save_conditioned_policy(policy, folder.state_policy if policy.stateful else folder.prompt_policy)
        return folder

    def export(self, out: Path) -> dict:
        """The trained model folder → out (write_model) with the training's record; returns the run's summary and
        history. With train.validation, the exported model is the checkpoint validation chose (loaded here, the
        run's history kept); with train.export_mix, its update scaled toward the base."""
        selected = self.selected_iteration()
        if selected != self.iteration:
            self.trainer.load(self.state_dir / "checkpoints" / f"{selected:06d}")
        checkpoints.require_finite(self.trained_weights(), "the trained model")
        if self.cfg.export_mix != 1.0:  # WiSE-FT: the update scaled toward the base (the training is over)
            self.generator.mix_update(self.trainer.ref, self.cfg.export_mix)
        folder = self.write_model(out)
        last = self.history[-max(1, len(self.history) // 10):]
        reward = sum(h["reward_mean"] for h in last) / len(last) if last else float("nan")
        record = {"mode": self.cfg.mode, "iterations": len(self.history), "reward_last_10pct": reward} | (
            {"export_mix": self.cfg.export_mix} if self.cfg.export_mix != 1.0 else {}) | (
            {"train_prompts": f"{self.prompt_file.name}: {len(self.specs)} prompts"}
            if self.prompt_file.name != "train.parquet" else {})
        if self.validating:
            record |= {"selected_iteration": selected, "validations": self.validations, "regressions": {
                i: r for i, v in self.validations.items()
                if (r := regressions(v, self.validations[0], self.cfg.validation.tolerance))}}
        folder.write_record(record)
        self._fill_guard_rewards()
        return {"mode": self.cfg.mode, "iterations": len(self.history), "selected_iteration": selected,
                "history": self.history, "guards": self.guard_rows}


# The iteration's steps as tasks: visible per iteration in the Prefect UI. They take the live session, so they
# are never cached or persisted.
@task(cache_policy=NO_CACHE, persist_result=False)
def grouped_rollout(session: TrainingSession, batch: GroupedBatch) -> Rollout:
    """B prompts × G trajectories, one schedule action per step each."""
    return session.trainer.rollout(batch)


@task(cache_policy=NO_CACHE, persist_result=False)
def score_rewards(session: TrainingSession, batch: GroupedBatch, rollout: Rollout) -> dict[str, torch.Tensor]:
    """Decode and score every trajectory."""
    return session.score(batch, rollout)


@task(cache_policy=NO_CACHE, persist_result=False)
def co_update(session: TrainingSession, batch: GroupedBatch, rollout: Rollout,
              scores: dict[str, torch.Tensor]) -> dict:
    """One GRPO update of θ and/or φ from the shared group advantages."""
    return session.update(batch, rollout, scores)


@task(cache_policy=NO_CACHE, persist_result=False)
def save_checkpoint(session: TrainingSession) -> str:
    """Atomically write the session's state (manifest last); the two newest checkpoints are kept."""
    return str(session.save_checkpoint())
