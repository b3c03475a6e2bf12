"""GRPO math as small pure functions (DESIGN.md §1).

Shapes: rewards (B, G) for B prompts × G samples; per-step log-probs (n, S) for n = B·G trajectories and S
trained steps; advantages broadcast over steps. Both policies (model θ, schedule φ) share the advantages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch

if TYPE_CHECKING:
    from cogrpo.config import StepSelection


def group_advantages(rewards: torch.Tensor, scale_by_std: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """(r − mean_group) / (std_group + eps); without the std ("Dr. GRPO") only centred. rewards (B, G)."""
    centred = rewards - rewards.mean(-1, keepdim=True)
    if not scale_by_std:
        return centred
    return centred / (rewards.std(-1, keepdim=True, unbiased=False) + eps)


def aggregated_advantages(terms: torch.Tensor, weights: torch.Tensor, how: Literal["sum", "advantage"] = "sum",
                          scale_by_std: bool = True) -> torch.Tensor:
    """The advantages (B, G) of K reward terms (B, G, K) weighted by `weights` (K,): 'sum' the group advantages of
    their weighted sum; 'advantage' the weighted sum of each term's own group advantages (MixGRPO), so a term's
    scale does not set its share and a term constant within a group adds nothing to that group's advantages."""
    if how == "sum":
        return group_advantages(terms @ weights, scale_by_std)
    return group_advantages(terms.transpose(-1, -2), scale_by_std).transpose(-1, -2) @ weights


def zero_std_fraction(rewards: torch.Tensor, tol: float = 1e-8) -> float:
    """Fraction of groups whose rewards are all equal: they carry no GRPO signal."""
    return (rewards.std(-1, unbiased=False) <= tol).float().mean().item()


@dataclass
class Surrogate:
    loss: torch.Tensor  # scalar, to minimise
    clip_fraction: float
    ratio_mean: float


def clipped_surrogate(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor,
                      clip_eps: float, weight: torch.Tensor | None = None) -> Surrogate:
    """−mean(min(ρA, clip(ρ, 1−ε, 1+ε)A)) with ρ = exp(new − old); all (n, S). `weight` masks elements."""
    ratio = torch.exp(logp_new - logp_old)
    clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps)
    objective = torch.minimum(ratio * advantages, clipped * advantages)
    weight = torch.ones_like(objective) if weight is None else weight
    total = weight.sum().clamp(min=1)
    loss = -(objective * weight).sum() / total
    was_clipped = ((ratio - clipped).abs() > 0).float()
    return Surrogate(loss, ((was_clipped * weight).sum() / total).item(), ((ratio.detach() * weight).sum() / total).item())


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Per-element k3 estimator of KL(π‖π_ref) from samples of π: exp(ref − π) − (ref − π) − 1 ≥ 0."""
    d = logp_ref - logp
    return torch.exp(d) - d - 1


def token_policy_loss(logp_tok: torch.Tensor, ref_tok: torch.Tensor, committed: torch.Tensor,
                      logp_old: torch.Tensor, advantages: torch.Tensor, *, clip_eps: float, kl_beta: float,
                      share: float, cells: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """The model's loss over one slice of a batch, so that the slices' gradients add up to the whole batch's.

    logp_tok, ref_tok, committed: (n, S, N) per-cell log-probs under θ and θ_ref and the cells each trained step
    committed; logp_old (n, S) the rollout's; advantages (n, 1). The token action of a step is every cell it
    committed (one joint ratio); the surrogate is weighted by the slice's share of the global batch, the k3 KL is
    normalised by the global batch's committed `cells`. Metrics come weighted the same way, so they add up too."""
    # cells not committed at a step are selected out *before* any arithmetic, not multiplied by 0: at cells already
    # unmasked the model's output is untrained and free to drift, so exp(ref − π) there overflows to inf, and
    # inf · 0 is NaN in the KL and in its gradient (the default run's NaN KLs). Same values wherever it is finite.
    logp_tok = torch.where(committed, logp_tok, 0.0)
    sur = clipped_surrogate(logp_tok.sum(-1), logp_old, advantages, clip_eps)
    kl = k3_kl(logp_tok, torch.where(committed, ref_tok, 0.0)).sum() / cells
    metrics = {"model/loss": share * sur.loss.item(), "model/kl": kl.item(),
               "model/clip_fraction": share * sur.clip_fraction, "model/ratio_mean": share * sur.ratio_mean}
    return share * sur.loss + kl_beta * kl, metrics


def schedule_policy_loss(logp: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, *,
                         clip_eps: float, share: float) -> tuple[torch.Tensor, dict[str, float]]:
    """The schedule policy's loss over a batch: the clipped surrogate of its per-step actions' log-probs (n, S),
    weighted by the batch's share of the global batch (no KL: φ has no reference)."""
    sur = clipped_surrogate(logp, logp_old, advantages, clip_eps)
    return share * sur.loss, {"schedule/loss": share * sur.loss.item(), "schedule/clip_fraction":
                              share * sur.clip_fraction, "schedule/ratio_mean": share * sur.ratio_mean}


def select_steps(how: StepSelection, steps: int, n: int, gen: torch.Generator, progress: float,
                 entropy: torch.Tensor | None = None) -> torch.Tensor:
    """Which n of a trajectory's T = `steps` decoding steps an update trains, sorted, shared by the batch (so the
    recompute is one forward): 'random' a uniform subset (drawn from gen); 'window' n consecutive steps that slide
    from the first steps to the last as training progresses (progress in [0, 1), MixGRPO's sliding window);
    'entropy' the n steps of highest mean token entropy (T,) over the batch, where the sampling was most
    uncertain (MaskFocus's critical steps). Every step's log-probs stay exact: only which steps enter the loss."""
    if how == "random":
        return torch.randperm(steps, generator=gen)[:n].sort().values
    if how == "window":
        start = min(steps - n, int(progress * (steps - n + 1)))
        return torch.arange(start, start + n)
    if entropy is None:
        raise ValueError("step selection 'entropy' needs the steps' entropy")
    return entropy.topk(n).indices.sort().values
