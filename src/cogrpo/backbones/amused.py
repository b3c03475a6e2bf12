"""aMUSEd (Patil et al., 2024) built from diffusers' own modules, behind the `Generator` interface.

The decoding loop is cogrpo's (cogrpo.core.sampler); the conditioning, the CFG combination, decoding, LoRA and the
files are `ClipVQGenerator`'s (cogrpo.backbones.clip_vq), as diffusers' `AmusedPipeline` computes them: its
transformer is diffusers' UVit2DModel, which takes no timestep; prompts are padded to the tokenizer's
model_max_length; the image side defaults to the transformer's sample_size times the VQ-GAN's downsampling.
What differs by design lives in the schedule (cogrpo.core.schedule): the pipeline does not temperature-scale its
logits (τ_s = 1 reproduces it) and anneals its re-mask temperature linearly to 0 (`remask_anneal: to_zero`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from cogrpo.backbones.clip_vq import ClipVQGenerator


class AmusedGenerator(ClipVQGenerator):
    @staticmethod
    def transformer_class() -> type:
        from diffusers import UVit2DModel

        return UVit2DModel

    @property
    def text_max_length(self) -> int:
        return self.tokenizer.model_max_length

    def default_resolution(self, scale: int) -> int:
        return self.transformer.config.sample_size * scale

    @staticmethod
    def layers(transformer: nn.Module) -> Iterable[nn.Module]:
        return transformer.transformer_layers

    def forward_logits(self, transformer: nn.Module, x: torch.Tensor, hidden: torch.Tensor, pooled: torch.Tensor,
                       micro: torch.Tensor, timestep: torch.Tensor | None) -> torch.Tensor:
        return transformer(x, micro_conds=micro, pooled_text_emb=pooled, encoder_hidden_states=hidden)
