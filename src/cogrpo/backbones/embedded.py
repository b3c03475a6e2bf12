"""The embedded world's generator: the small MDM, its frozen text encoder and the learned VQ tokenizer,
behind the `Generator` interface (cogrpo.core.generator). Everything trains; the KL reference is a frozen copy.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import numpy as np
import torch
from torch import nn

from cogrpo.backbones.mdm import MDM
from cogrpo.backbones.text import TextEncoder
from cogrpo.config import WorldConfig
from cogrpo.core.generator import Condition
from cogrpo.errors import InputError
from cogrpo.world.tokenizer import Tokenizer


class EmbeddedGenerator(nn.Module):
    def __init__(self, model: MDM, text: TextEncoder, tokenizer: Tokenizer):
        super().__init__()
        self.model, self.text, self.tokenizer = model, text, tokenizer
        self.n_tokens, self.codebook_size, self.mask_id = model.cfg.n_tokens, model.cfg.vocab_size, model.cfg.mask_id
        self.device = torch.device("cpu")
        self.prompt_feature_dim = model.cfg.text_dim

    @classmethod
    def load(cls, model_dir: str | Path, tokenizer_dir: str | Path,
             world: WorldConfig | None = None) -> "EmbeddedGenerator":
        """The model and its tokenizer; with `world`, refused (one line) where either was made for another board."""
        model, tokenizer = MDM.load(model_dir), Tokenizer.load(tokenizer_dir)
        if world is not None:
            _require_board(world, model, tokenizer, Path(model_dir), Path(tokenizer_dir))
        return cls(model, TextEncoder(model.cfg.text_encoder, model.cfg.max_text_tokens), tokenizer)

    def encode(self, prompts: list[str]) -> Condition:
        text, mask = self.text.encode(prompts)
        return Condition({"text": text, "text_mask": mask})

    def prompt_features(self, cond: Condition) -> torch.Tensor:
        """The mean of the prompt's token states over its real tokens."""
        text, mask = cond.tensors["text"], cond.tensors["text_mask"].unsqueeze(-1).float()
        return (text * mask).sum(1) / mask.sum(1).clamp(min=1)

    def decoding_condition(self, cond: Condition) -> Condition:
        """cond with the MDM's `guided_context` of its prompts: every block's context keys and values and the
        attended context tokens, of the prompt and of its null prompt (its rows B → 2B: stored batch-first as
        (B, 2, …))."""
        kv, attend = self.model.guided_context(cond.tensors["text"], cond.tensors["text_mask"])
        pairs = lambda t: t.unflatten(0, (2, len(cond))).transpose(0, 1)  # noqa: E731  (2B, …) → (B, 2, …)
        return Condition(cond.tensors | {"context_kv": pairs(kv.movedim(2, 0)), "context_mask": pairs(attend)})

    def guided_logits(self, tokens: torch.Tensor, cond: Condition, cfg_scale: torch.Tensor,
                      timestep: torch.Tensor | None = None) -> torch.Tensor:
        """The MDM takes no timestep: `timestep` is ignored."""
        c = cond.tensors
        if "context_kv" not in c:
            return self.model.guided_logits(tokens, c["text"], c["text_mask"], cfg_scale)
        rows = lambda t: t.transpose(0, 1).flatten(0, 1)  # noqa: E731  (B, 2, …) → (2B, …)
        context = rows(c["context_kv"]).movedim(0, 2), rows(c["context_mask"])
        return self.model.guided_logits(tokens, None, None, cfg_scale, context=context)

    def decode(self, tokens: torch.Tensor) -> np.ndarray:
        return self.tokenizer.decode(tokens)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.model.parameters())

    def reference(self) -> "EmbeddedGenerator":
        return EmbeddedGenerator(copy.deepcopy(self.model).eval().requires_grad_(False), self.text, self.tokenizer)

    def sampling(self) -> contextlib.nullcontext:
        """Decoding as it is: nothing to fold."""
        return contextlib.nullcontext()

    @torch.no_grad()
    def mix_update(self, reference: "EmbeddedGenerator", weight: float) -> None:
        for p, r in zip(self.model.parameters(), reference.model.parameters(), strict=True):
            p.lerp_(r, 1 - weight)

    def save_trained(self, folder: Path) -> None:
        self.model.save(folder)

    def load_trained(self, folder: Path) -> None:
        self.model.load_state_dict(MDM.load(folder).state_dict())

    def export(self, folder: Path) -> None:
        self.model.save(folder)


def _require_board(world: WorldConfig, model: MDM, tokenizer: Tokenizer, model_dir: Path, tokenizer_dir: Path) -> None:
    """A model or tokenizer of another grid or cell size decodes scenes the world's checker reads on the wrong
    board: every reward ≈ 0, trained on and exported without an error (issue 29)."""
    made = [(model_dir / "config.json", "grid", model.cfg.grid, "world.grid", world.grid),
            (tokenizer_dir / "tokenizer.json", "grid", tokenizer.grid, "world.grid", world.grid),
            (tokenizer_dir / "tokenizer.json", "cell", tokenizer.cell, "world.cell_px", world.cell_px)]
    for file, field, value, key, wanted in made:
        if value != wanted:
            raise InputError(f"{file}: made for {field} {value}, but params' {key} is {wanted}: rebuild it for this "
                             "world (dvc repro pretrain: the tokenizer and base model)")
