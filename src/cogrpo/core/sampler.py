"""Multi-step masked decoding with per-step knobs, and the exact log-prob recompute of a trajectory.

At step t, for every masked cell: y ~ softmax(guided logits / τ_s) (Gumbel-max); confidence =
log p(y) + τ_r · Gumbel; the k_t most confident masked cells are committed and never change again.
The token action's log-prob is the sum of log p(y) over the committed cells. The choice of *which*
cells to commit is treated as part of the environment (its Gumbel noise is not scored); the record
keeps everything needed to score it later.

Noise comes from one generator per trajectory, seeded by that trajectory's seed, drawn in a fixed
order, so a trajectory does not depend on what else is in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from cogrpo.backbones.mdm import MDM
from cogrpo.core.schedule import masked_counts


@dataclass
class Trajectory:
    """A batch of n decoding trajectories over N cells and T steps."""

    tokens: torch.Tensor  # (n, N) final tokens
    commit_step: torch.Tensor  # (n, N) 0-based step at which each cell was committed
    knobs: torch.Tensor  # (n, T, 4) knob values used (ratio, τ_s, τ_r, w)
    logp: torch.Tensor  # (n, T) committed-token log-probs at rollout time
    seeds: torch.Tensor  # (n,) per-trajectory noise seeds
    prompt_index: torch.Tensor  # (n,) row of the prompt each trajectory answers

    @property
    def steps(self) -> int:
        return self.knobs.shape[1]

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name).contiguous() for f in fields(self)}

    def save(self, path: str | Path) -> None:
        save_file(self.tensors(), str(path))

    @classmethod
    def load(cls, path: str | Path) -> "Trajectory":
        t = load_file(str(path))
        return cls(**{f.name: t[f.name] for f in fields(cls)})

    @classmethod
    def cat(cls, parts: list["Trajectory"]) -> "Trajectory":
        return cls(**{f.name: torch.cat([getattr(p, f.name) for p in parts]) for f in fields(cls)})


def _gumbel(u: torch.Tensor) -> torch.Tensor:
    return -torch.log(-torch.log(u.clamp(1e-20, 1 - 1e-7)))


def step_logprobs(model: MDM, x: torch.Tensor, text: torch.Tensor, text_mask: torch.Tensor,
                  knobs_t: torch.Tensor) -> torch.Tensor:
    """log softmax(guided logits / τ_s) at one step: (n, N, V)."""
    logits = model.guided_logits(x, text, text_mask, knobs_t[:, 3])
    return torch.log_softmax(logits / knobs_t[:, 1, None, None], -1)


@torch.no_grad()
def sample(model: MDM, text: torch.Tensor, text_mask: torch.Tensor, knobs: torch.Tensor, seeds: torch.Tensor,
           prompt_index: torch.Tensor | None = None, progress: bool = False) -> Trajectory:
    """Decode n trajectories. text (n, L, D) and text_mask (n, L) per trajectory; knobs (T, 4) shared or
    (n, T, 4) per trajectory; seeds (n,)."""
    n, N, V, mask_id = len(seeds), model.cfg.n_tokens, model.cfg.vocab_size, model.cfg.mask_id
    knobs = knobs.expand(n, -1, -1) if knobs.dim() == 2 else knobs
    T = knobs.shape[1]
    counts = masked_counts(knobs[..., 0], N)
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    x = torch.full((n, N), mask_id, dtype=torch.long)
    commit_step = torch.full((n, N), T, dtype=torch.long)
    logp = torch.zeros(n, T)
    for t in tqdm(range(T), desc="sampling", leave=False, disable=not progress):
        noise = torch.stack([torch.rand(N, V + 1, generator=g) for g in gens])
        lp = step_logprobs(model, x, text, text_mask, knobs[:, t])
        y = (lp + _gumbel(noise[..., :V])).argmax(-1)
        lp_y = lp.gather(-1, y[..., None])[..., 0]
        masked = x == mask_id
        conf = torch.where(masked, lp_y + knobs[:, t, 2, None] * _gumbel(noise[..., V]), -torch.inf)
        k = masked.sum(1) - counts[:, t]
        rank = conf.argsort(dim=1, descending=True, stable=True).argsort(dim=1)
        commit = rank < k[:, None]
        x = torch.where(commit, y, x)
        commit_step[commit] = t
        logp[:, t] = (lp_y * commit).sum(1)
    if prompt_index is None:
        prompt_index = torch.arange(n)
    return Trajectory(x, commit_step, knobs.clone(), logp, seeds.clone(), prompt_index.clone())


def trajectory_token_logprobs(model: MDM, traj: Trajectory, text: torch.Tensor, text_mask: torch.Tensor,
                              steps: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-cell log-probs of the final tokens (n, S, N) at each of `steps`, and the mask (n, S, N) of the
    cells committed at that step, recomputed from the record alone in one batched forward."""
    n, T = traj.logp.shape
    steps = torch.arange(T) if steps is None else steps
    S = len(steps)
    before = traj.commit_step[:, None, :] < steps[None, :, None]  # (n, S, N) committed before step
    x = torch.where(before, traj.tokens[:, None], model.cfg.mask_id).flatten(0, 1)
    knobs = traj.knobs[:, steps].flatten(0, 1)
    rep = lambda a: a.repeat_interleave(S, 0)  # noqa: E731
    lp = step_logprobs(model, x, rep(text), rep(text_mask), knobs).view(n, S, -1, model.cfg.vocab_size)
    lp_tok = lp.gather(-1, traj.tokens[:, None, :, None].expand(n, S, -1, 1))[..., 0]
    return lp_tok, traj.commit_step[:, None, :] == steps[None, :, None]


def trajectory_logprobs(model: MDM, traj: Trajectory, text: torch.Tensor, text_mask: torch.Tensor,
                        steps: torch.Tensor | None = None) -> torch.Tensor:
    """Committed-token log-probs (n, len(steps)) under `model`; with the rollout's model this reproduces
    traj.logp. Differentiable in the model."""
    lp_tok, now = trajectory_token_logprobs(model, traj, text, text_mask, steps)
    return (lp_tok * now).sum(-1)
