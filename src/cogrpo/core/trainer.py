"""Co-GRPO: one rollout → score → update iteration over the model θ and the schedule policy φ.

`CoGRPO` holds what persists across iterations (the generator's trainable weights θ, its frozen reference θ_ref,
φ, two optimizers) and saves all but θ_ref, which is the generator as loaded. φ is one schedule policy per
trained step count (`train.extra_steps`), or with `train.share_schedule` one policy read at every step count through
decoding progress; iterations cycle through the step counts, the model is shared. The mode decides only what is
trainable and stochastic:
  co         θ and φ train, both in every update; schedule actions are sampled from π_φ
  alternate  θ and φ train in turn (train.alternate): a θ phase updates θ with φ frozen, then a φ phase updates φ
             with θ frozen; a θ phase's schedule is sampled, or π_φ's mean (alternate.model_phase_schedule)
  model      θ trains; the schedule is the deterministic base (actions 0, φ frozen)
  schedule   φ trains; θ is frozen
Randomness of iteration i comes from seeds derived from (train.seed, i), so a resumed run replays
exactly what an uninterrupted one would have done.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from cogrpo.config import TrainConfig
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.distributed import SINGLE, Ranks
from cogrpo.core.generator import Generator
from cogrpo.core.grpo import (aggregated_advantages, schedule_policy_loss, select_steps, token_policy_loss,
                              zero_std_fraction)
from cogrpo.core.policy import (ProgressSchedulePolicy, PromptSchedulePolicy, SchedulePolicy, StateChoices,
                                StateSchedulePolicy)
from cogrpo.core.sampler import Trajectory, sample, trajectory_token_logprobs
from cogrpo.core.schedule import KNOBS
from cogrpo.errors import InputError


SKIPPED_IN_A_ROW = 3  # iterations without any update that stop a run: it diverged, and exporting would pass off
# the last good model as the finished training


def iteration_generator(seed: int, iteration: int, stream: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + iteration) * 7 + stream)


def draw_prompts(tags: list[str], n: int, generator: torch.Generator) -> torch.Tensor:
    """n distinct prompt rows, tag-balanced: every tag is equally likely whatever its prompt count
    (dense DPG-style prompts outnumber each GenEval tag many times over in the training set)."""
    by_tag: dict[str, list[int]] = {}
    for i, t in enumerate(tags):
        by_tag.setdefault(t, []).append(i)
    groups = [torch.tensor(rows) for _, rows in sorted(by_tag.items())]
    weights = torch.cat([torch.full((len(g),), 1.0 / len(g)) for g in groups])
    order = torch.cat(groups)
    return order[torch.multinomial(weights, min(n, len(order)), replacement=False, generator=generator)]


@dataclass
class Rollout:
    traj: Trajectory
    actions: torch.Tensor  # (n, T, 4) schedule actions in pre-activation space
    sched_logp: torch.Tensor  # (n, T) log π_φ(a_t) at rollout time
    context: torch.Tensor | None = None  # (n, F) the prompts' features a prompt- or state-conditioned policy read
    features: torch.Tensor | None = None  # (n, T, F_state) the decoding state a state policy read before each step


def _state_to_tensors(prefix: str, state: dict) -> dict[str, torch.Tensor]:
    """Flatten an optimizer state dict (tensors only) for safetensors."""
    out = {}
    for pid, s in state["state"].items():
        for k, v in s.items():
            out[f"{prefix}.{pid}.{k}"] = torch.as_tensor(v).clone().contiguous()
    return out


def _tensors_to_state(prefix: str, tensors: dict, template: dict) -> dict:
    state: dict = {}
    for key, v in tensors.items():
        if key.startswith(prefix + "."):
            _, pid, k = key.split(".", 2)
            state.setdefault(int(pid), {})[k] = v
    return {"state": state, "param_groups": template["param_groups"]}


class CoGRPO:
    def __init__(self, model: Generator, base_knobs: torch.Tensor | dict[int, torch.Tensor], cfg: TrainConfig,
                 ranks: Ranks = SINGLE, anchor: Callable[[torch.Generator], torch.Tensor] | None = None):
        """model: the generator as loaded (its reference is taken now); base_knobs: the base schedule (T, 4), or one
        per trained step count, the main one first; ranks: this process's place in a data-parallel run, whose
        batches are each rank's share of the iteration's prompts (core/distributed.py); anchor: the pretraining loss
        of a batch drawn with the given generator (train.anchor_coef weighs it), where the backbone has one."""
        bases = base_knobs if isinstance(base_knobs, dict) else {len(base_knobs): base_knobs}
        if cfg.anchor_coef and anchor is None:
            raise ValueError("train.anchor_coef > 0 needs the pretraining loss of the generator (anchor)")
        self.cfg, self.ranks, self.anchor = cfg, ranks, anchor if cfg.anchor_coef else None
        self.model = model
        self.ref = model.reference()
        main, *extra = bases
        self.policy = self._policy(bases[main])  # the main step count's: evaluation and export
        self.policies = nn.ModuleDict({str(main): self.policy} | {
            str(T): ProgressSchedulePolicy(self.policy, bases[T]) if cfg.share_schedule else self._policy(bases[T])
            for T in extra})
        self.train_model = cfg.mode in ("co", "alternate", "model")
        self.train_schedule = cfg.mode in ("co", "alternate", "schedule")
        self.trained = model.trainable_parameters()
        model.requires_grad_(False)
        for p in self.trained:
            p.requires_grad_(self.train_model)
        self.policies.requires_grad_(self.train_schedule)
        self.opt_model = torch.optim.Adam(self.trained, lr=cfg.lr_model) if self.train_model else None
        self.opt_sched = (torch.optim.Adam(self._schedule_param_groups(), lr=cfg.lr_schedule)
                          if self.train_schedule else None)
        self.iteration = 0
        self.skip_reasons: list[str] = []  # the last update's skipped passes: the metrics that were not finite
        self.skipped_in_a_row = 0  # iterations whose every pass was skipped, up to this one
        ranks.broadcast_([p.data for p in self.trained] + [p.data for p in self.policies.parameters()])

    def _policy(self, base: torch.Tensor) -> SchedulePolicy:
        cfg = self.cfg
        if cfg.schedule_policy == "per_step":
            return SchedulePolicy(base, cfg.sigma_init, cfg.sigma_floor, cfg.schedule_knobs)
        kind = {"prompt": PromptSchedulePolicy, "state": StateSchedulePolicy}[cfg.schedule_policy]
        return kind(base, self.model.prompt_feature_dim, cfg.sigma_init, cfg.sigma_floor, cfg.schedule_knobs)

    def _schedule_param_groups(self) -> list[dict]:
        """φ's parameters at train.lr_schedule, except the weights of each layer of a policy's network (a prompt
        read-out, a state policy's two layers) at lr_schedule ÷ the layer's fan-in F: Adam moves every weight by
        about the learning rate, and the F weights behind one output move it together, F times as far as a per-step
        mean (at lr_schedule itself the first updates throw the schedule far off the base)."""
        layers = [m for m in self.policies.modules() if isinstance(m, nn.Linear)]
        rest = [p for p in self.policies.parameters() if all(p is not m.weight for m in layers)]
        return [{"params": rest}] + [{"params": [m.weight], "lr": self.cfg.lr_schedule / m.in_features}
                                     for m in layers]

    def phase(self) -> tuple[bool, bool]:
        """(θ updates, φ updates) at this iteration: what the mode trains, and in mode alternate whose turn it is."""
        if self.cfg.mode != "alternate":
            return self.train_model, self.train_schedule
        turns = self.cfg.alternate
        model_turn = self.iteration % (turns.model_iterations + turns.schedule_iterations) < turns.model_iterations
        return model_turn, not model_turn

    def current_steps(self) -> int:
        """This iteration's step count: the cycle [main, *extra] indexed by the iteration."""
        counts = [p.steps for p in self.policies.values()]
        return counts[self.iteration % len(counts)]

    # ---- rollout -------------------------------------------------------------------------------------
    @torch.no_grad()
    def rollout(self, batch: GroupedBatch) -> Rollout:
        """G trajectories per prompt of the batch, prompt-major. Every rank draws the whole iteration's actions and
        seeds and keeps its share, so a rank's trajectories are those one process would make for its prompts."""
        policy = self.policies[str(self.current_steps())]
        n = batch.trajectories * self.ranks.world
        mine = self.ranks.share(n)
        gen = iteration_generator(self.cfg.seed, self.iteration, 1)
        noise = policy.noise(n, gen)[mine] if self.train_schedule else None
        seeds = torch.randint(0, 2**62, (n,), generator=gen)[mine]
        cond = batch.trajectory_cond()
        context = self.model.prompt_features(cond) if policy.conditioned else None
        self.model.eval()
        with self.model.sampling():  # e.g. LoRA folded into the weights: no adapter cost while decoding
            return self._sample(policy, cond, noise, seeds, batch, context)

    def _sample(self, policy: SchedulePolicy, cond, noise: torch.Tensor | None, seeds: torch.Tensor,
                batch: GroupedBatch, context: torch.Tensor | None) -> Rollout:
        T = policy.steps
        if not self.train_schedule:  # model mode: the deterministic base schedule
            actions = torch.zeros(len(seeds), T, len(KNOBS))
            traj = sample(self.model, cond, policy.knobs(actions), seeds, batch.trajectory_rows())
            return Rollout(traj, actions, torch.zeros(len(seeds), T), context)
        at_mean = (self.cfg.mode == "alternate" and self.cfg.alternate.model_phase_schedule == "mean"
                   and self.phase()[0])  # a θ phase rolling out at the schedule evaluation decodes with
        noise = torch.zeros_like(noise) if at_mean else noise
        if policy.stateful:  # each step's action chosen from the state before it, recorded for the update
            choices = StateChoices(policy, noise, context)
            traj = sample(self.model, cond, policy.base, seeds, batch.trajectory_rows(), choose=choices)
            actions, features = choices.actions, choices.features
        else:
            actions, features = policy.act(noise, context), None
            traj = sample(self.model, cond, policy.knobs(actions), seeds, batch.trajectory_rows())
        return Rollout(traj, actions, policy.log_prob(actions, context, features), context, features)

    # ---- update --------------------------------------------------------------------------------------
    def update(self, batch: GroupedBatch, ro: Rollout, rewards: torch.Tensor,
               weights: torch.Tensor | None = None) -> dict:
        """One GRPO update from the batch's rollout and its rewards: (B·G,), or (B·G, K) the K terms of the training
        reward as they enter its weighted sum with `weights` (K,), which train.reward_aggregation makes advantages
        (cogrpo.core.grpo.aggregated_advantages); with several ranks, this rank's share.

        The one update path: the loss of every policy is its share of the global batch's (one process: share 1),
        the model's taken in slices of train.micro_batch trajectories (one slice: the whole batch), each slice's
        backward run at once; gradients and metrics are then summed over the ranks (a no-op for one process), so
        every rank takes the same step as one process holding the whole batch."""
        cfg, ranks = self.cfg, self.ranks
        terms = rewards if rewards.dim() == 2 else rewards[:, None]
        weights = terms.new_ones(1) if weights is None else weights
        everyone = ranks.gather(terms) @ weights  # prompt-major across ranks, as one process would hold them
        metrics: dict = {"reward_mean": everyone.mean().item(), "reward_std": everyone.std(unbiased=False).item(),
                         "zero_std_groups": zero_std_fraction(everyone.view(-1, batch.group_size)),
                         "steps": float(ro.traj.steps)}
        if not torch.isfinite(everyone).all():  # every rank holds them all, so every rank stops
            raise InputError(f"iteration {self.iteration + 1}: {int((~torch.isfinite(everyone)).sum())} of "
                             f"{len(everyone)} rewards are NaN or infinite; nothing was updated")
        adv = aggregated_advantages(batch.groups(terms), weights, cfg.reward_aggregation,
                                    cfg.scale_by_std).flatten()[:, None]
        cond, T = batch.trajectory_cond(), ro.traj.steps
        n_steps = max(1, math.ceil(cfg.step_fraction * T))
        gen, anchor_gen = (iteration_generator(cfg.seed, self.iteration, stream) for stream in (2, 3))
        update_model, update_schedule = self.phase()
        if cfg.mode == "alternate":
            metrics["alternate/model_phase"] = float(update_model)
        skipped, self.skip_reasons = 0, []
        entropy = self.ranks.gather(ro.traj.entropy).mean(0) if cfg.step_selection == "entropy" else None
        for _ in range(cfg.inner_epochs):
            # one subset of steps per epoch, shared by the batch, so the recompute is one forward
            steps = select_steps(cfg.step_selection, T, n_steps, gen, self.iteration / cfg.iterations,
                                 entropy)
            for opt in self._optimizers():
                opt.zero_grad(set_to_none=True)
            part: dict[str, float] = {}
            if update_model:
                part |= self._model_backward(ro.traj, cond, steps, adv, len(everyone))
                if self.anchor:
                    part |= self._anchor_backward(anchor_gen)
            if update_schedule:
                part |= self._schedule_backward(ro, steps, adv, len(rewards) / len(everyone))
            part = self._sum_over_ranks(part, update_model, update_schedule)
            if not all(math.isfinite(v) for v in part.values()):
                skipped += 1
                self.skip_reasons.append(", ".join(k for k, v in part.items() if not math.isfinite(v)))
                for opt in self._optimizers():
                    opt.zero_grad(set_to_none=True)
                continue
            metrics |= part
            if update_model:
                metrics["model/grad_norm"] = torch.nn.utils.clip_grad_norm_(self.trained, cfg.max_grad_norm).item()
                self.opt_model.step()
            if update_schedule:
                # every policy's parameters: the step count's own, or the shared one's (the others have no gradient)
                metrics["schedule/grad_norm"] = torch.nn.utils.clip_grad_norm_(self.policies.parameters(),
                                                                               cfg.max_grad_norm).item()
                self.opt_sched.step()
        self.model.eval()
        self.iteration += 1
        self.skipped_in_a_row = self.skipped_in_a_row + 1 if skipped == cfg.inner_epochs else 0
        if self.skipped_in_a_row == SKIPPED_IN_A_ROW:
            raise InputError(f"iteration {self.iteration}: no update in the last {SKIPPED_IN_A_ROW} iterations "
                             f"(non-finite {'; '.join(dict.fromkeys(self.skip_reasons))}): the training diverged")
        return metrics | {"skipped": float(skipped)} | self.schedule_metrics()

    def _optimizers(self) -> list[torch.optim.Optimizer]:
        return [opt for opt in (self.opt_model, self.opt_sched) if opt]

    def _model_backward(self, traj: Trajectory, cond, steps: torch.Tensor, adv: torch.Tensor, n: int) -> dict:
        """θ's gradient of its share of the loss of the global batch of n trajectories, accumulated over slices of
        train.micro_batch trajectories (the activations of one slice in memory); the slices' metrics summed."""
        cfg, device = self.cfg, self.model.device
        self.model.train()
        cells = (traj.commit_step[:, None, :] == steps[None, :, None]).sum().reshape(1)
        self.ranks.sum_([cells])  # the KL is normalised by the global batch's committed cells
        cells = cells[0].clamp(min=1).to(device)
        size = cfg.micro_batch or len(adv)
        total: dict[str, float] = {}
        for start in range(0, len(adv), size):
            rows = slice(start, start + size)
            part, part_cond = traj[rows], cond[rows]
            lp_tok, committed = trajectory_token_logprobs(self.model, part, part_cond, steps)
            with torch.no_grad():
                ref_tok, _ = trajectory_token_logprobs(self.ref, part, part_cond, steps)
            loss, metrics = token_policy_loss(lp_tok, ref_tok, committed, part.logp[:, steps].to(device),
                                              adv[rows].to(device), clip_eps=cfg.clip_eps, kl_beta=cfg.kl_beta,
                                              share=len(adv[rows]) / n, cells=cells)
            loss.backward()
            total = {k: total.get(k, 0.0) + v for k, v in metrics.items()}
        return total

    def _anchor_backward(self, gen: torch.Generator) -> dict:
        """The pretraining loss's gradient, weighted by train.anchor_coef. Every rank draws the same batch and takes
        1/world of it, so the sum over the ranks is what one process takes."""
        loss = self.anchor(gen)
        (self.cfg.anchor_coef / self.ranks.world * loss).backward()
        return {"model/anchor_loss": loss.item() / self.ranks.world}

    def _schedule_backward(self, ro: Rollout, steps: torch.Tensor, adv: torch.Tensor, share: float) -> dict:
        """φ's gradient of its share of the global batch's loss, over the step count's policy."""
        logp = self.policies[str(ro.traj.steps)].log_prob(ro.actions, ro.context, ro.features)[:, steps]
        loss, metrics = schedule_policy_loss(logp, ro.sched_logp[:, steps], adv, clip_eps=self.cfg.clip_eps,
                                             share=share)
        loss.backward()
        return metrics

    def _sum_over_ranks(self, metrics: dict[str, float], model: bool, schedule: bool) -> dict[str, float]:
        """The gradients of the parameters this update steps (θ's if `model`, φ's if `schedule`) and the metrics
        summed over the ranks, in one all-reduce (one process: unchanged). A parameter without a gradient on this
        rank (a step count not trained this iteration) joins as zeros, since every rank must reduce the same
        tensors, and leaves without one again, as Adam skips it."""
        if self.ranks.world == 1:
            return metrics
        params = (self.trained if model else []) + (list(self.policies.parameters()) if schedule else [])
        unused = [p for p in params if p.grad is None]
        for p in unused:
            p.grad = torch.zeros_like(p)
        summed = torch.tensor(list(metrics.values()), dtype=torch.float64)
        self.ranks.sum_([p.grad for p in params] + [summed])
        for p in unused:
            p.grad = None
        return dict(zip(metrics, summed.tolist()))

    def schedule_metrics(self) -> dict[str, float]:
        """Every step's deterministic knob value and action std, e.g. schedule/step3/cfg (main step count)
        and schedule/T4/step3/cfg (an extra one)."""
        out = {}
        for T, policy in self.policies.items():
            prefix = "schedule/" if policy is self.policy else f"schedule/T{T}/"
            knobs, std = policy.deterministic_knobs(), policy.std().detach()
            for t in range(policy.steps):
                for k, name in enumerate(KNOBS):
                    out[f"{prefix}step{t + 1}/{name}"] = knobs[t, k].item()
                    if policy.moves[k]:  # a held knob is not explored: no std to show
                        out[f"{prefix}step{t + 1}/{name}_std"] = std[t, k].item()
        return out

    def learned_schedules(self) -> dict[int, torch.Tensor]:
        """The deterministic schedule of every trained step count, the main one first."""
        return {p.steps: p.deterministic_knobs() for p in self.policies.values()}

    # ---- checkpoints ---------------------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        """Trained weights (the generator's format), schedule policy, optimizers and the iteration."""
        folder = Path(folder)
        self.model.save_trained(folder / "model")
        tensors = {f"policy.{k}": v.contiguous() for k, v in self.policies.state_dict().items()}
        for name, opt in (("opt_model", self.opt_model), ("opt_sched", self.opt_sched)):
            if opt:
                tensors |= _state_to_tensors(name, opt.state_dict())
        save_file(tensors, str(folder / "train_state.safetensors"))
        (folder / "train_state.json").write_text(json.dumps({"iteration": self.iteration, "mode": self.cfg.mode}))

    def load(self, folder: str | Path) -> None:
        folder = Path(folder)
        self.model.load_trained(folder / "model")
        tensors = load_file(str(folder / "train_state.safetensors"))
        self.policies.load_state_dict({k[len("policy."):]: v for k, v in tensors.items() if k.startswith("policy.")})
        for name, opt in (("opt_model", self.opt_model), ("opt_sched", self.opt_sched)):
            if opt:
                opt.load_state_dict(_tensors_to_state(name, tensors, opt.state_dict()))
        self.iteration = json.loads((folder / "train_state.json").read_text())["iteration"]
