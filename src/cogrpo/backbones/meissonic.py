"""Meissonic (Bai et al., 2024), the Co-GRPO paper's backbone, behind the `Generator` interface.

It loads a snapshot in the published layout of MeissonFlow/Meissonic (or rpzhou/Co-GRPO-Meissonic-1B): the
transformer is cogrpo's `MeissonicTransformer` (cogrpo.backbones.meissonic_transformer). The rest is
`ClipVQGenerator`'s (cogrpo.backbones.clip_vq), which is what the authors' src/pipeline.py computes around its loop
(docs/meissonic.md records their pipeline and scheduler rules), with these Meissonic specifics:

  - prompts padded or truncated to 77 CLIP tokens (the pipeline hard-codes 77, whatever the tokenizer says);
  - the transformer gets each step's timestep as the pipeline passes the scheduler's, the countdown T − 1 − t
    (cogrpo.core.sampler.countdown; ×1000 inside the transformer, as the authors do);
  - the image side defaults to 1024 px (the pipeline's default height and width; its transformer config has no
    sample_size): the VQ grid is 1024 / 16 = 64 per side, 32 inside the transformer, so model.resolution must
    be a multiple of twice the VQ-GAN's downsampling;
  - RoPE positions (0, row, col) over the grid the attention sees, i.e. after the transformer's downsampling.
    This is the pipeline's at 1024 px; at other sizes the pipeline builds them over twice that grid, which fits no
    downsampling transformer, so there it would fail where cogrpo decodes.

The base schedule with the rules of the pipeline at its defaults is in the README (48 steps, ratio_curve amused,
τ_s 1, τ_r 2 → 0, CFG 9), checked step by step in fp32 by tests/test_meissonic.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from cogrpo.backbones.clip_vq import ClipVQGenerator
from cogrpo.backbones.meissonic_transformer import MeissonicTransformer, save_published
from cogrpo.config import ModelConfig
from cogrpo.errors import InputError

TEXT_TOKENS = 77  # the authors' pipeline pads and truncates every prompt to 77 CLIP tokens
RESOLUTION = 1024  # the authors' pipeline's default image side


class MeissonicGenerator(ClipVQGenerator):
    def __init__(self, folder: Path, cfg: ModelConfig):
        super().__init__(folder, cfg)
        if self.transformer.config.downsample and self.side % 2:  # a 2×2 stride-2 conv, then its transpose
            scale = self.resolution // self.side
            raise InputError(f"model.resolution = {self.resolution}: must be a multiple of {2 * scale}, 2× the "
                             f"VQ-GAN's scale {scale}, as Meissonic's transformer halves the token grid")

    @staticmethod
    def transformer_class() -> type:
        return MeissonicTransformer

    @property
    def text_max_length(self) -> int:
        return TEXT_TOKENS

    def default_resolution(self, scale: int) -> int:
        return RESOLUTION

    @staticmethod
    def layers(transformer: nn.Module) -> Iterable[nn.Module]:
        return [*transformer.transformer_blocks, *transformer.single_transformer_blocks]

    def forward_logits(self, transformer: nn.Module, x: torch.Tensor, hidden: torch.Tensor, pooled: torch.Tensor,
                       micro: torch.Tensor, timestep: torch.Tensor | None) -> torch.Tensor:
        if timestep is None:
            raise ValueError("Meissonic's transformer reads the decoding step: pass guided_logits its timestep "
                             "(cogrpo.core.sampler.countdown)")
        return transformer(hidden_states=x, encoder_hidden_states=hidden, pooled_projections=pooled,
                           micro_conds=micro, timestep=timestep)

    def save_transformer(self, transformer: nn.Module, folder: Path) -> None:
        save_published(transformer, folder)
