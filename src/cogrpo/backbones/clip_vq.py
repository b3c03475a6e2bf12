"""What aMUSEd and Meissonic share behind the `Generator` interface: a CLIP text encoder with projection, a VQ-GAN
and a token transformer over the VQ grid, in the hub snapshot layout (cogrpo.backbones.snapshot).

`ClipVQGenerator` computes what both authors' pipelines compute around their decoding loop, the same way: the CLIP
prompt encoding (penultimate hidden states and the pooled projection; the null condition is model.negative_prompt,
by default the empty prompt as in both pipelines), micro-conditioning [width, height, crop 0, 0, aesthetic score 6]
in the text encoder's dtype, the CFG combination uncond + w (cond − uncond) on the transformer's logits (taken in
fp32: the pipelines combine them in the model's dtype, the same in fp32), and VQ-GAN decoding of the final tokens.
The decoding loop is cogrpo's (cogrpo.core.sampler). A subclass says which transformer it loads and how it is
called; its weight file is checked name by name and shape by shape against its config.json before anything loads
(cogrpo.backbones.snapshot.check_weights).

A model update trains LoRA adapters (peft, in fp32 whatever the base dtype) on the transformer, or the whole
transformer (`lora_rank: 0`). With adapters the KL reference is the same modules with the adapters switched off,
never a second copy.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from cogrpo.backbones.snapshot import ADAPTERS, PARTS, check_weights, mask_token_id
from cogrpo.config import ModelConfig
from cogrpo.core.generator import Condition
from cogrpo.errors import InputError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}  # model.dtype
AESTHETIC_SCORE = 6  # both pipelines' default micro-conditioning


def pick_device(name: str) -> torch.device:
    """model.device: 'auto' is CUDA when present, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def micro_conditions(width: int, height: int, batch: int, crop: tuple[int, int] = (0, 0),
                     aesthetic_score: float = AESTHETIC_SCORE, dtype: torch.dtype = torch.float32,
                     device: torch.device | str | None = None) -> torch.Tensor:
    """(batch, 5) micro-conditioning as both pipelines build it: [width, height, crop top, crop left, score]."""
    row = torch.tensor([width, height, crop[0], crop[1], aesthetic_score], dtype=dtype, device=device)
    return row.expand(batch, -1)


class ClipVQGenerator(nn.Module):
    """The shared generator; subclasses define the hooks below the `---- hooks` line."""

    def __init__(self, folder: Path, cfg: ModelConfig):
        from diffusers import VQModel
        from transformers import CLIPTextModelWithProjection, CLIPTokenizer

        super().__init__()
        self.folder, self.cfg = Path(folder), cfg
        # the cheap checks first: a broken snapshot stops before gigabytes load
        check_weights(self.transformer_class(), self.folder / "transformer", cfg.pretrained)
        self.mask_id = mask_token_id(self.folder)
        self.device = pick_device(cfg.device)
        dtype = DTYPES[cfg.dtype]
        load = dict(torch_dtype=dtype)
        self.transformer = self.transformer_class().from_pretrained(self.folder / "transformer", **load)
        self.transformer.to(self.device)
        self.vqvae = VQModel.from_pretrained(self.folder / "vqvae", **load).to(self.device).requires_grad_(False)
        if dtype == torch.float16 and self.vqvae.config.force_upcast:  # as the pipelines: fp16 VQ-GAN decodes in fp32
            self.vqvae.float()
        self.text_encoder = CLIPTextModelWithProjection.from_pretrained(self.folder / "text_encoder", **load)
        self.text_encoder.to(self.device).requires_grad_(False).eval()
        self.prompt_feature_dim = self.text_encoder.config.projection_dim
        self.tokenizer = CLIPTokenizer.from_pretrained(self.folder / "tokenizer")
        scale = 2 ** (len(self.vqvae.config.block_out_channels) - 1)
        self.resolution = cfg.resolution or self.default_resolution(scale)
        if self.resolution % scale:
            raise InputError(f"model.resolution = {self.resolution}: must be a multiple of the VQ-GAN's {scale}")
        self.side = self.resolution // scale
        self.n_tokens, self.codebook_size = self.side**2, self.transformer.config.codebook_size
        self.lora = cfg.lora_rank > 0
        if self.lora:
            from peft import LoraConfig

            self.transformer.add_adapter(LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha,
                                                    target_modules=list(cfg.lora_targets), init_lora_weights=True))
            for name, p in self.transformer.named_parameters():
                if "lora_" in name:
                    p.data = p.data.float()  # adapters train in fp32 whatever the base dtype
        if cfg.gradient_checkpointing:
            checkpoint_layers(self.layers(self.transformer))
        self.transformer.eval()
        self._null: Condition | None = None

    # ---- hooks --------------------------------------------------------------------------------------------
    @staticmethod
    def transformer_class() -> type:
        """The diffusers model class of the snapshot's transformer/."""
        raise NotImplementedError

    @property
    def text_max_length(self) -> int:
        """Text tokens a prompt is padded or truncated to."""
        raise NotImplementedError

    def default_resolution(self, scale: int) -> int:
        """Image side in pixels when model.resolution is None (scale: the VQ-GAN's downsampling)."""
        raise NotImplementedError

    @staticmethod
    def layers(transformer: nn.Module) -> Iterable[nn.Module]:
        """The blocks gradient checkpointing recomputes in backward."""
        raise NotImplementedError

    def forward_logits(self, transformer: nn.Module, x: torch.Tensor, hidden: torch.Tensor, pooled: torch.Tensor,
                       micro: torch.Tensor, timestep: torch.Tensor | None) -> torch.Tensor:
        """The transformer's logits (B, codebook, H, W) at token grids x (B, H, W)."""
        raise NotImplementedError

    def save_transformer(self, transformer: nn.Module, folder: Path) -> None:
        """Write a transformer in the snapshot's own format (what the export's transformer/ holds)."""
        transformer.save_pretrained(folder)

    # ---- conditioning and logits, as the pipelines compute them -------------------------------------------
    @torch.no_grad()
    def encode(self, prompts: list[str]) -> Condition:
        ids = self.tokenizer(prompts, return_tensors="pt", padding="max_length", truncation=True,
                             max_length=self.text_max_length).input_ids.to(self.device)
        out = self.text_encoder(ids, return_dict=True, output_hidden_states=True)
        return Condition({"pooled": out.text_embeds, "hidden": out.hidden_states[-2]})

    def prompt_features(self, cond: Condition) -> torch.Tensor:
        """CLIP's projected pooled text embedding (a micro-conditioning input too)."""
        return cond.tensors["pooled"].float().cpu()

    def null_condition(self) -> Condition:
        if self._null is None:
            self._null = self.encode([self.cfg.negative_prompt])
        return self._null

    def decoding_condition(self, cond: Condition) -> Condition:
        """cond as it is: what the transformers compute of the prompts alone (aMUSEd's cross-attention keys and
        values of the text, ~4 % of a step at 256 px) lives inside diffusers' attention, and Meissonic's text stream
        changes with the image in every block."""
        return cond

    def guided_logits(self, tokens: torch.Tensor, cond: Condition, cfg_scale: torch.Tensor,
                      timestep: torch.Tensor | None = None) -> torch.Tensor:
        return self._guided(self.transformer, tokens, cond, cfg_scale, timestep)

    def _guided(self, transformer: nn.Module, tokens: torch.Tensor, cond: Condition, cfg_scale: torch.Tensor,
                timestep: torch.Tensor | None = None) -> torch.Tensor:
        B, null = len(tokens), self.null_condition().tensors
        both = lambda k: torch.cat([null[k].expand(B, *null[k].shape[1:]), cond.tensors[k]])  # noqa: E731
        hidden = both("hidden")
        micro = micro_conditions(self.resolution, self.resolution, 2 * B, dtype=hidden.dtype, device=self.device)
        x = tokens.to(self.device).view(B, self.side, self.side).repeat(2, 1, 1)
        steps = None if timestep is None else timestep.repeat(2)
        logits = self.forward_logits(transformer, x, hidden, both("pooled"), micro, steps)
        logits = logits.float().reshape(2 * B, self.codebook_size, self.n_tokens).transpose(1, 2)
        uncond, cond_logits = logits.chunk(2)
        return uncond + cfg_scale.to(self.device)[:, None, None] * (cond_logits - uncond)

    def train(self, mode: bool = True) -> "ClipVQGenerator":
        """Only the transformer changes mode: the text encoder and the VQ-GAN stay frozen in eval."""
        self.training = mode
        self.transformer.train(mode)
        return self

    @contextmanager
    def sampling(self) -> Iterator[None]:
        """Decoding at the cost of the model without adapters (issue 27): each LoRA layer's base weight is swapped
        for a folded copy, W + ΔW computed in fp32 and stored in W's dtype, and its adapter branch skipped (peft's
        `merged_adapters`, as after a merge); on leaving, the original weights are put back untouched (a merge and
        unmerge in place would drift W by rounding). Costs a copy of the adapted weights while inside. fp32 weights
        only: the folded log-probs match the adapters-on recompute of the update to ~1e-5 per step (the test's
        tolerance 1e-4), while a 16-bit W + ΔW rounds the update away (bf16, tiny aMUSEd: 0.54 per step, so PPO's
        ratio would start at e^±0.5), so 16-bit weights decode with the adapters unfused."""
        swapped = []
        if self.lora and DTYPES[self.cfg.dtype] == torch.float32:
            from peft.tuners.lora import LoraLayer

            with torch.no_grad():
                for module in self.transformer.modules():
                    if isinstance(module, LoraLayer) and not module.merged and module.active_adapters:
                        base = module.get_base_layer()
                        delta = sum(module.get_delta_weight(a).float() for a in module.active_adapters)
                        swapped.append((module, base, base.weight.data))
                        base.weight.data = (base.weight.data.float() + delta).to(base.weight.dtype)
                        module.merged_adapters = list(module.active_adapters)  # forward: the base layer alone
        try:
            yield
        finally:
            for module, base, weight in swapped:
                base.weight.data = weight
                module.merged_adapters = []

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, batch: int = 16) -> np.ndarray:
        parts = []
        for chunk in tokens.to(self.device).split(batch):
            shape = (len(chunk), self.side, self.side, self.vqvae.config.latent_channels)
            img = self.vqvae.decode(chunk, force_not_quantize=True, shape=shape).sample.clip(0, 1)
            parts.append((img.permute(0, 2, 3, 1).float().cpu().numpy() * 255).round().astype(np.uint8))
        return np.concatenate(parts)

    # ---- what trains, the reference, and the files ------------------------------------------------------
    def trainable_parameters(self) -> list[nn.Parameter]:
        if self.lora:
            return [p for n, p in self.transformer.named_parameters() if "lora_" in n]
        return list(self.transformer.parameters())

    def reference(self) -> "_Reference":
        if self.lora:
            return _Reference(self, None)
        frozen = self.transformer_class().from_pretrained(self.folder / "transformer",
                                                          torch_dtype=DTYPES[self.cfg.dtype])
        return _Reference(self, frozen.to(self.device).requires_grad_(False).eval())

    @torch.no_grad()
    def mix_update(self, reference: "_Reference", weight: float) -> None:
        if self.lora:  # the update is lora_B · lora_A, lora_B starting at zero: scaling lora_B scales the update
            for name, p in self.transformer.named_parameters():
                if "lora_B" in name:
                    p.mul_(weight)
            return
        for p, r in zip(self.transformer.parameters(), reference.transformer.parameters(), strict=True):
            p.lerp_(r.to(p.dtype), 1 - weight)

    def save_trained(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        if self.lora:
            from peft.utils import get_peft_model_state_dict

            state = get_peft_model_state_dict(self.transformer)
            save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(folder / ADAPTERS))
            (folder / "adapter.json").write_text(json.dumps(self.cfg.model_dump(
                include={"pretrained", "lora_rank", "lora_alpha", "lora_targets"}), indent=1))
        else:
            self.transformer.save_pretrained(folder)

    def load_trained(self, folder: Path) -> None:
        if self.lora:
            from peft.utils import set_peft_model_state_dict

            saved = json.loads((folder / "adapter.json").read_text())
            mine = self.cfg.model_dump(include={"lora_rank", "lora_alpha", "lora_targets"})
            if {k: saved.get(k) for k in mine} != mine:
                raise InputError(f"{folder / 'adapter.json'}: adapters made with {saved}, params ask for {mine}")
            state = load_file(str(folder / ADAPTERS), device=str(self.device))
            result = set_peft_model_state_dict(self.transformer, state)
            missing = [k for k in result.missing_keys if "lora_" in k]
            if result.unexpected_keys or missing:
                raise InputError(f"{folder / ADAPTERS}: adapters do not fit this model "
                                 f"({(result.unexpected_keys or missing)[0]})")
        else:
            state = self.transformer_class().from_pretrained(folder, torch_dtype=DTYPES[self.cfg.dtype]).state_dict()
            self.transformer.load_state_dict(state)

    def export(self, folder: Path) -> None:
        """A folder in the snapshot's layout: its parts, the transformer with the trained adapters merged into its
        weights (model.pretrained can name it, lora_rank 0: the loader reads it back as a base model)."""
        folder.mkdir(parents=True, exist_ok=True)
        for part in PARTS:
            if part != "transformer":
                shutil.copytree(self.folder / part, folder / part, dirs_exist_ok=True)
        if (self.folder / "model_index.json").is_file():
            shutil.copy(self.folder / "model_index.json", folder / "model_index.json")
        # merged in fp32: a bf16 base would round most of a small trained delta away
        merged = self.transformer_class().from_pretrained(self.folder / "transformer", torch_dtype=torch.float32)
        if self.lora:
            from peft import LoraConfig
            from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict

            merged.add_adapter(LoraConfig(r=self.cfg.lora_rank, lora_alpha=self.cfg.lora_alpha,
                                          target_modules=list(self.cfg.lora_targets)))
            adapters = get_peft_model_state_dict(self.transformer)
            set_peft_model_state_dict(merged, {k: v.detach().float().cpu() for k, v in adapters.items()})
            merged.fuse_lora()
            merged.unload_lora()
        else:
            merged.load_state_dict({k: v.float().cpu() for k, v in self.transformer.state_dict().items()})
        self.save_transformer(merged, folder / "transformer")


def checkpoint_layers(layers: Iterable[nn.Module]) -> None:
    """Recompute each layer in backward. The layers' forward is wrapped in place, so parameter names (and LoRA
    adapter keys) stay as they are; diffusers' own switches are not used (UVit2DModel's wrapper passes the layers'
    keyword arguments to a function that takes none, diffusers 0.42, so it fails in the first update)."""
    from torch.utils.checkpoint import checkpoint

    for layer in layers:
        def forward(*args, _plain=layer.forward, **kwargs):
            if torch.is_grad_enabled():
                return checkpoint(_plain, *args, use_reentrant=False, **kwargs)
            return _plain(*args, **kwargs)

        layer.forward = forward


class _Reference:
    """The KL reference: the generator's own modules with the adapters switched off (LoRA), or the snapshot's
    transformer loaded again and frozen (full fine-tuning)."""

    def __init__(self, gen: ClipVQGenerator, transformer: nn.Module | None):
        self.gen, self.transformer = gen, transformer
        self.n_tokens, self.codebook_size, self.mask_id, self.device = (gen.n_tokens, gen.codebook_size,
                                                                         gen.mask_id, gen.device)

    def decoding_condition(self, cond: Condition) -> Condition:
        return self.gen.decoding_condition(cond)

    def guided_logits(self, tokens: torch.Tensor, cond: Condition, cfg_scale: torch.Tensor,
                      timestep: torch.Tensor | None = None) -> torch.Tensor:
        if self.transformer is not None:
            return self.gen._guided(self.transformer, tokens, cond, cfg_scale, timestep)
        trained = {p: p.requires_grad for p in self.gen.trainable_parameters()}
        self.gen.transformer.disable_adapters()
        try:
            return self.gen._guided(self.gen.transformer, tokens, cond, cfg_scale, timestep)
        finally:
            self.gen.transformer.enable_adapters()  # peft marks the adapters trainable again: restore what they were
            for p, flag in trained.items():
                p.requires_grad_(flag)
