"""What the MDP core asks of a token image generator, and nothing more (DESIGN.md §3).

The sampler, the trainer and the benchmarks see a backbone only through `Generator`: prompts become a
`Condition`, a token state and a per-trajectory CFG scale become guided logits, tokens become images. The
embedded MDM (cogrpo.backbones.embedded), aMUSEd (cogrpo.backbones.amused) and Meissonic
(cogrpo.backbones.meissonic) implement it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, Protocol

import numpy as np
import torch


@dataclass(frozen=True)
class Condition:
    """A batch of encoded prompts: batch-first tensors whose names and meaning belong to the generator that
    made them (the embedded MDM: token states and their mask; aMUSEd: CLIP hidden states and pooled embedding)."""

    tensors: dict[str, torch.Tensor]

    def __len__(self) -> int:
        return len(next(iter(self.tensors.values())))

    def __getitem__(self, rows: slice) -> "Condition":
        return Condition({k: v[rows] for k, v in self.tensors.items()})

    def repeat_interleave(self, n: int) -> "Condition":
        """Each prompt's row repeated n times in place: (B, …) → (B·n, …)."""
        return Condition({k: v.repeat_interleave(n, 0) for k, v in self.tensors.items()})


class Generator(Protocol):
    """A masked token image generator with classifier-free guidance.

    Logits are float32 over the codebook (the mask token is never predicted); `mask_id` is outside it.
    `train()` / `eval()` / `parameters()` are torch's: a generator is an `nn.Module`.
    """

    n_tokens: int  # N image tokens
    codebook_size: int  # V, the width of the logits
    mask_id: int  # the [MASK] token of a token state
    device: torch.device
    prompt_feature_dim: int  # F of prompt_features
    compile_sampling: bool  # the sampler decodes each step under torch.compile (model.compile; absent: False)

    def encode(self, prompts: list[str]) -> Condition:
        """The prompts' condition (one row per prompt)."""

    def prompt_features(self, cond: Condition) -> torch.Tensor:
        """One pooled text feature vector per row (B, F), what a prompt-conditioned schedule policy reads."""

    def guided_logits(self, tokens: torch.Tensor, cond: Condition, cfg_scale: torch.Tensor,
                      timestep: torch.Tensor | None = None) -> torch.Tensor:
        """l_u + w (l_c − l_u) at token states (B, N) for conditions of B rows and scales w (B,): (B, N, V).

        timestep (B,) long, from the sampler: each row's decoding step t of T as a MaskGIT scheduler counts it
        down, T − 1 − t (T − 1 at the first step, 0 at the last; `sampler.countdown`). Meissonic's transformer
        reads it, as its pipeline passes the scheduler's timestep; the embedded MDM and aMUSEd ignore it."""

    def decoding_condition(self, cond: Condition) -> Condition:
        """cond with what every decoding step's guided forward computes from the prompts alone, computed once for a
        whole decoding (the sampler asks before its first step; the embedded MDM: its context keys and values);
        guided_logits gives the same logits from either."""

    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        """Final tokens (B, N) → uint8 RGB images (B, H, W, 3)."""

    def sampling(self) -> ContextManager[None]:
        """A context for decoding without autograd (a rollout) in which the generator computes what it computes
        outside it, at the lowest cost it can (aMUSEd and Meissonic with LoRA: the adapters folded into the
        weights); what it changes is undone on leaving."""

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """What a model update trains (LoRA adapters, or every weight of the denoiser)."""

    def reference(self) -> "Generator":
        """The frozen KL reference: the weights the training starts from. The trainer takes it before it loads a
        checkpoint, so a resumed run keeps the reference of the run it resumes."""

    def mix_update(self, reference: "Generator", weight: float) -> None:
        """Weight-space ensembling (WiSE-FT, Wortsman et al. 2022), in place: the trained weights become
        reference + weight · (trained − reference), the update scaled by `weight`."""

    def save_trained(self, folder: Path) -> None:
        """Write the trained weights (what `load_trained` reads back) to folder."""

    def load_trained(self, folder: Path) -> None:
        """Read weights `save_trained` wrote, replacing the trainable ones."""

    def export(self, folder: Path) -> None:
        """Write the model in its backbone's own loadable format (a standalone folder)."""
