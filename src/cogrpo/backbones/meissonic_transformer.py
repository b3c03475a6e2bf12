"""Meissonic's token transformer (Bai et al., 2024, arXiv 2410.08261), written for cogrpo from diffusers' blocks.

`MeissonicTransformer` computes what the authors' `Transformer2DModel` (viiika/Meissonic, src/transformer.py; the
same class in AIDC-AI/Meissonic) computes, with the same module names, so `MeissonicTransformer.from_pretrained(
snapshot / "transformer")` reads the published `config.json` and `diffusion_pytorch_model.safetensors` of
MeissonFlow/Meissonic unchanged. Its defaults are the published config (transformer/config.json):

    attention_head_dim 128, axes_dims_rope [16, 56, 56], codebook_size 8192, downsample true, guidance_embeds false,
    in_channels 64, joint_attention_dim 1024, num_attention_heads 8, num_layers 14, num_single_layers 28,
    patch_size 1, pooled_projection_dim 1024, upsample true, vocab_size 8256   (_class_name "Transformer2DModel")

Forward, for token ids x (B, H, W) on the VQ grid (64×64 at 1024 px), D = heads · head_dim:
  1. micro-conditioning: each of the 5 micro_conds [width, height, crop top, crop left, aesthetic score] → a 256-wide
     sinusoid (flip_sin_to_cos, shift 0), concatenated (1280) after the pooled text embedding; `cond_embed`
     (Linear-SiLU-Linear, no biases) maps it to D. This D-vector is then the "pooled projection" of Flux's
     time-text embedding, which is why pooled_projection_dim must equal D.
  2. tokens: `embed` (embedding, RMSNorm, 1×1 conv) → `down_block` (RMSNorm, 2×2 stride-2 conv: 64² → 32²)
     → flattened row-major → `project_to_hidden_norm`, `project_to_hidden`.
  3. text: `context_embedder` (Linear) → `encoder_proj_layer_norm` (RMSNorm).
  4. temb = Flux's CombinedTimestepTextProjEmbeddings(timestep · 1000, step-1 vector).
  5. RoPE (Flux's, θ = 10000) over ids = [txt_ids; img_ids] (text first): txt_ids zeros (77, 3), img_ids
     (0, row, col) over the grid *after* downsampling.
  6. num_layers dual-stream Flux blocks, then num_single_layers single-stream Flux blocks over [text; image].
  7. image part → `project_from_hidden_norm`, `project_from_hidden` → (B, D, H/2, W/2) → `up_block` (RMSNorm,
     2×2 stride-2 transposed conv) → `mlm_layer` (1×1 conv, RMSNorm, 1×1 conv) → logits (B, codebook_size, H, W).
All RMSNorms have eps 1e-6 and a weight; every conv / linear of steps 1, 2, 7 and the projections is bias-free.

Simplified, on purpose: no ControlNet residuals, no LoRA `joint_attention_kwargs` scale, no gradient checkpointing
switch and no fused-QKV processor (none changes the logits or the weight names), and no guidance embedding
(`guidance_embeds: true` is refused; the published config has false). The blocks are diffusers' current
Flux blocks; the authors used diffusers 0.30's `Attention` with a Flux processor: same weights and the same
computation (the single-stream blocks here split and rejoin [text; image] per block, which is exact). The
qk-RMSNorm is torch's rather than diffusers' own, equal up to float rounding.

What the authors' pipeline and scheduler do around this transformer, and how cogrpo reproduces them:
docs/meissonic.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.loaders import PeftAdapterMixin
from diffusers.models.downsampling import Downsample2D
from diffusers.models.embeddings import CombinedTimestepTextProjEmbeddings, TimestepEmbedding, get_timestep_embedding
from diffusers.models.modeling_utils import ModelMixin
from diffusers.models.normalization import RMSNorm
from diffusers.models.transformers.transformer_flux import (FluxPosEmbed, FluxSingleTransformerBlock,
                                                            FluxTransformerBlock)
from diffusers.models.unets.uvit_2d import ConvMlmLayer, UVit2DConvEmbed
from diffusers.models.upsampling import Upsample2D
from torch import nn

MICRO_CONDS = 5  # [width, height, crop top, crop left, aesthetic score]
MICRO_COND_ENCODE_DIM = 256  # per micro-condition sinusoid: fixed in the authors' forward, not a config field
EPS = 1e-6  # every RMSNorm outside the Flux blocks (fixed in the authors' __init__)
ROPE_THETA = 10000
PUBLISHED_CLASS = "Transformer2DModel"  # the hub config's _class_name (the authors' class)


class _Resample(nn.Module):
    """The authors' `Simple_UVitBlock`: an RMSNorm + 2×2 stride-2 conv (`downsample`) or transposed conv
    (`upsample`), or nothing; the attribute names are the weight names."""

    def __init__(self, channels: int, down: bool, up: bool):
        super().__init__()
        norm = dict(norm_type="rms_norm", eps=EPS, elementwise_affine=True, bias=False, kernel_size=2, padding=0)
        self.downsample = Downsample2D(channels, use_conv=True, name="Conv2d_0", **norm) if down else None
        self.upsample = (Upsample2D(channels, use_conv_transpose=True, name="conv", interpolate=False, **norm)
                         if up else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.downsample is not None:
            x = self.downsample(x)
        if self.upsample is not None:
            x = self.upsample(x)
        return x


class MeissonicTransformer(ModelMixin, ConfigMixin, PeftAdapterMixin):
    """Token ids (B, H, W) + CLIP condition → logits (B, codebook_size, H, W); see the module docstring."""

    _no_split_modules = ["FluxTransformerBlock", "FluxSingleTransformerBlock"]

    @register_to_config
    def __init__(self, patch_size: int = 1, in_channels: int = 64, num_layers: int = 14, num_single_layers: int = 28,
                 attention_head_dim: int = 128, num_attention_heads: int = 8, joint_attention_dim: int = 1024,
                 pooled_projection_dim: int = 1024, guidance_embeds: bool = False,
                 axes_dims_rope: tuple[int, ...] = (16, 56, 56), vocab_size: int = 8256, codebook_size: int = 8192,
                 downsample: bool = True, upsample: bool = True):
        super().__init__()
        # patch_size and in_channels are published config fields that the authors' model never reads
        dim = num_attention_heads * attention_head_dim
        if pooled_projection_dim != dim:  # cond_embed's D-wide output is what time_text_embed projects
            raise ValueError(f"pooled_projection_dim {pooled_projection_dim} must equal heads × head_dim {dim}")
        if sum(axes_dims_rope) != attention_head_dim:
            raise ValueError(f"axes_dims_rope {axes_dims_rope} must sum to attention_head_dim {attention_head_dim}")
        if guidance_embeds:  # the published model has none, and cogrpo's sampler has no guidance value to pass
            raise ValueError("guidance_embeds true: a guidance-distilled Meissonic is not supported (the published "
                             "config has false)")
        self.pos_embed = FluxPosEmbed(theta=ROPE_THETA, axes_dim=list(axes_dims_rope))
        self.time_text_embed = CombinedTimestepTextProjEmbeddings(embedding_dim=dim,
                                                                  pooled_projection_dim=pooled_projection_dim)
        self.context_embedder = nn.Linear(joint_attention_dim, dim)
        self.transformer_blocks = nn.ModuleList(
            [FluxTransformerBlock(dim, num_attention_heads, attention_head_dim) for _ in range(num_layers)])
        self.single_transformer_blocks = nn.ModuleList(
            [FluxSingleTransformerBlock(dim, num_attention_heads, attention_head_dim)
             for _ in range(num_single_layers)])
        # the aMUSEd-style parts: the authors fix their widths to D, affine RMSNorms and no biases
        self.embed = UVit2DConvEmbed(dim, dim, vocab_size, True, EPS, False)
        self.mlm_layer = ConvMlmLayer(dim, dim, False, True, EPS, codebook_size)
        self.cond_embed = TimestepEmbedding(MICRO_CONDS * MICRO_COND_ENCODE_DIM + pooled_projection_dim, dim,
                                            sample_proj_bias=False)
        self.encoder_proj_layer_norm = RMSNorm(dim, EPS, True)
        self.project_to_hidden_norm = RMSNorm(dim, EPS, True)
        self.project_to_hidden = nn.Linear(dim, dim, bias=False)
        self.project_from_hidden_norm = RMSNorm(dim, EPS, True)
        self.project_from_hidden = nn.Linear(dim, dim, bias=False)
        self.down_block = _Resample(dim, down=downsample, up=False)
        self.up_block = _Resample(dim, down=False, up=upsample)

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor,
                pooled_projections: torch.Tensor, micro_conds: torch.Tensor, timestep: torch.Tensor,
                img_ids: torch.Tensor | None = None, txt_ids: torch.Tensor | None = None) -> torch.Tensor:
        """hidden_states: token ids (B, H, W); encoder_hidden_states (B, L, joint_attention_dim); pooled_projections
        (B, pooled_projection_dim); micro_conds (B, 5); timestep (B,) or (1,), the scheduler's step index on any
        device and dtype (×1000 here, as the authors do); img_ids / txt_ids: RoPE positions (n, 3), default
        `image_ids` of the post-downsampling grid and zeros (L, 3). Returns logits (B, codebook_size, H, W)."""
        B = hidden_states.shape[0]
        micro = get_timestep_embedding(micro_conds.flatten(), MICRO_COND_ENCODE_DIM, flip_sin_to_cos=True,
                                       downscale_freq_shift=0).reshape(B, -1)
        cond = self.cond_embed(torch.cat([pooled_projections, micro], 1).to(self.dtype))
        cond = cond.to(encoder_hidden_states.dtype)

        x = self.down_block(self.embed(hidden_states))
        context = self.encoder_proj_layer_norm(self.context_embedder(encoder_hidden_states))
        _, channels, height, width = x.shape
        x = x.permute(0, 2, 3, 1).reshape(B, height * width, channels)
        x = self.project_to_hidden(self.project_to_hidden_norm(x))

        temb = self.time_text_embed(timestep.to(device=x.device, dtype=x.dtype) * 1000, cond)

        if img_ids is None:
            img_ids = image_ids(height, width, x.device)
        if txt_ids is None:
            txt_ids = torch.zeros(context.shape[1], 3, device=x.device)
        rope = self.pos_embed(torch.cat([txt_ids, img_ids], 0))

        for block in self.transformer_blocks:
            context, x = block(hidden_states=x, encoder_hidden_states=context, temb=temb, image_rotary_emb=rope)
        for block in self.single_transformer_blocks:
            context, x = block(hidden_states=x, encoder_hidden_states=context, temb=temb, image_rotary_emb=rope)

        x = self.project_from_hidden(self.project_from_hidden_norm(x))
        x = x.reshape(B, height, width, channels).permute(0, 3, 1, 2)
        return self.mlm_layer(self.up_block(x))


def image_ids(height: int, width: int, device: torch.device | str | None = None) -> torch.Tensor:
    """RoPE positions (height·width, 3) of a token grid, row-major: (0, row, col). For the published model pass the
    grid the attention sees, i.e. half the VQ grid (what the authors' pipeline builds at 1024 px)."""
    ids = torch.zeros(height, width, 3, device=device)
    ids[..., 1] = torch.arange(height, device=device)[:, None]
    ids[..., 2] = torch.arange(width, device=device)[None, :]
    return ids.reshape(height * width, 3)


def save_published(model: MeissonicTransformer, folder: str | Path) -> None:
    """save_pretrained, with config.json naming the published class as the hub's does (MeissonicTransformer reads
    such a folder as its own; the authors' remote code finds its class by that name)."""
    model.save_pretrained(folder)
    path = Path(folder) / "config.json"
    config = json.loads(path.read_text())
    config["_class_name"] = PUBLISHED_CLASS
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
