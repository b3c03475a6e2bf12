"""Masked-token pretraining of the MDM on rendered (prompt, scene) pairs.

Simplifications, on purpose: scenes are drawn once into a fixed pool (`pool_size` pairs, reused across
steps) rather than streamed; prompts are drawn tag-balanced; the mask ratio follows MaskGIT's cosine
law; the loss is cross-entropy on masked cells only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from cogrpo.config import ModelConfig, PretrainConfig
from cogrpo.backbones.mdm import MDM, MDMConfig
from cogrpo.world.scenes import World
from cogrpo.backbones.text import TextEncoder
from cogrpo.world.tokenizer import Tokenizer


def build_model(cfg: ModelConfig, tokenizer: Tokenizer, text: TextEncoder, seed: int = 0) -> MDM:
    torch.manual_seed(seed)
    return MDM(MDMConfig(grid=tokenizer.grid, n_shapes=tokenizer.n_shapes, n_colors=tokenizer.n_colors,
                         text_encoder=cfg.text_encoder, text_dim=text.dim, max_text_tokens=cfg.max_text_tokens,
                         dim=cfg.dim, layers=cfg.layers, heads=cfg.heads, dropout=cfg.dropout))


@dataclass
class ScenePool:
    prompt_index: np.ndarray  # (n,) row in the prompt list
    tokens: torch.Tensor  # (n, N) tokenizer codes of a render satisfying that prompt


def make_pool(world: World, tokenizer: Tokenizer, specs: list[dict], size: int, seed: int,
              allowed: Callable[[str, str], bool] | None = None, progress: bool = False) -> ScenePool:
    """`size` pairs; prompts are drawn tag-balanced, scenes avoid the colour–shape pairs `allowed` rejects."""
    rng = np.random.default_rng(seed)
    by_tag: dict[str, list[int]] = {}
    for i, s in enumerate(specs):
        by_tag.setdefault(s["tag"], []).append(i)
    tags = sorted(by_tag)
    idx = np.array([by_tag[tags[t]][rng.integers(len(by_tag[tags[t]]))] for t in rng.integers(len(tags), size=size)])
    layouts = [world.layout_for(specs[i], rng, allowed) for i in tqdm(idx, desc="rendering scenes", disable=not progress)]
    images = np.stack([world.render(objs) for objs in layouts])
    return ScenePool(idx, torch.from_numpy(tokenizer.encode(images)))


def mask_tokens(tokens: torch.Tensor, mask_id: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask a cosine-distributed number (≥ 1) of random cells per row; returns (inputs, masked)."""
    B, N = tokens.shape
    ratio = torch.cos(math.pi / 2 * torch.rand(B, generator=gen))
    n_masked = (ratio * N).ceil().clamp(1, N).long()
    rank = torch.rand(B, N, generator=gen).argsort(1).argsort(1)
    masked = rank < n_masked[:, None]
    return torch.where(masked, mask_id, tokens), masked


def masked_token_loss(model: MDM, text: tuple[torch.Tensor, torch.Tensor], pool: ScenePool, batch_size: int,
                      cond_dropout: float, gen: torch.Generator) -> torch.Tensor:
    """The pretraining loss on `batch_size` pairs of the pool drawn with `gen`: cross-entropy on the masked cells."""
    rows = torch.randint(len(pool.tokens), (batch_size,), generator=gen)
    target = pool.tokens[rows]
    inputs, masked = mask_tokens(target, model.cfg.mask_id, gen)
    p = torch.from_numpy(pool.prompt_index)[rows]
    drop = torch.rand(batch_size, generator=gen) < cond_dropout
    logits = model(inputs, text[0][p], text[1][p], drop)
    return F.cross_entropy(logits[masked], target[masked])


def lr_at(step: int, cfg: PretrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def pretrain(model: MDM, text: tuple[torch.Tensor, torch.Tensor], pool: ScenePool, cfg: PretrainConfig,
             on_log: Callable[[int, dict], None] | None = None, progress: bool = True) -> list[dict]:
    """Train in place. text = (states, mask) of every prompt row. Returns the logged loss records."""
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    model.train()
    start, history, running = time.monotonic(), [], []
    bar = tqdm(range(cfg.steps), desc="pretraining", disable=not progress)
    for step in bar:
        loss = masked_token_loss(model, text, pool, cfg.batch_size, cfg.cond_dropout, gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running.append(loss.item())
        out_of_time = cfg.max_minutes and time.monotonic() - start > 60 * cfg.max_minutes
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps or out_of_time:
            record = {"step": step + 1, "loss": float(np.mean(running)), "lr": lr_at(step, cfg),
                      "minutes": (time.monotonic() - start) / 60}
            running = []
            history.append(record)
            bar.set_postfix(loss=f"{record['loss']:.3f}")
            if on_log:
                on_log(step + 1, record)
        if out_of_time:
            break
    model.eval()
    return history
