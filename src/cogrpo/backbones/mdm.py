"""The masked diffusion model: a bidirectional transformer over image tokens that also attends to
the prompt's context tokens [null, text tokens].

Image tokens are the tokenizer's cell tokens (0 = empty, 1 + shape·n_colors + colour) plus [MASK].
Shape and colour are factorised in the input embedding and in the output logits
(logit[1 + s·C + c] = shape_logit[s] + color_logit[c]), which lets the model compose pairs it never saw.
Rows and columns get separate position embeddings, which makes "left of" and "above" easy to express.
The condition enters as the frozen text encoder's token states, projected; dropping it (for CFG)
masks every text token, leaving only the learned null token to attend to.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from cogrpo.core.checkpoints import require_finite
from cogrpo.errors import InputError


@dataclass(frozen=True)
class MDMConfig:
    grid: int
    n_shapes: int
    n_colors: int
    text_encoder: str
    text_dim: int
    max_text_tokens: int
    dim: int = 128
    layers: int = 4
    heads: int = 4
    dropout: float = 0.0

    @property
    def n_tokens(self) -> int:
        return self.grid**2

    @property
    def vocab_size(self) -> int:
        return 1 + self.n_shapes * self.n_colors

    @property
    def mask_id(self) -> int:
        return self.vocab_size


class Block(nn.Module):
    """Pre-LN block whose image tokens attend to themselves and to the (fixed) context tokens.

    The context (null + text tokens) only supplies keys and values, so the MLP runs on the N image
    tokens alone: the prompt is usually longer than the image, and this is ~3× cheaper than joint attention.
    """

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.ctx_kv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))

    def _split(self, t: torch.Tensor, n: int) -> torch.Tensor:
        """(B, L, n·D) → (n, B, heads, L, D / heads)."""
        B, _, D = t.shape
        return t.view(B, -1, n, self.heads, D // n // self.heads).permute(2, 0, 3, 1, 4)

    def context_kv(self, ctx: torch.Tensor) -> torch.Tensor:
        """The context's keys and values (2, B, heads, L, D / heads): what the block reads of the prompt."""
        return self._split(self.ctx_kv(ctx), 2)

    def forward(self, x: torch.Tensor, ctx_kv: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        q, k, v = self._split(self.qkv(self.norm1(x)), 3)
        kc, vc = ctx_kv
        a = F.scaled_dot_product_attention(q, torch.cat([kc, k], 2), torch.cat([vc, v], 2),
                                           attn_mask=attend[:, None, None, :],
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(a.transpose(1, 2).reshape(B, N, D))
        return x + self.mlp(self.norm2(x))


class MDM(nn.Module):
    def __init__(self, cfg: MDMConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.text_proj = nn.Linear(cfg.text_dim, d)
        self.null = nn.Parameter(torch.zeros(1, 1, d))
        self.ctx_norm = nn.LayerNorm(d)
        self.kind = nn.Embedding(3, d)  # empty, object, mask
        self.shape_emb = nn.Embedding(cfg.n_shapes, d)
        self.color_emb = nn.Embedding(cfg.n_colors, d)
        self.row_emb = nn.Embedding(cfg.grid, d)
        self.col_emb = nn.Embedding(cfg.grid, d)
        self.blocks = nn.ModuleList(Block(d, cfg.heads, cfg.dropout) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1 + cfg.n_shapes + cfg.n_colors)
        self.apply(self._init)
        cells = torch.arange(cfg.n_tokens)
        self.register_buffer("rows", cells // cfg.grid, persistent=False)
        self.register_buffer("cols", cells % cfg.grid, persistent=False)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        C = self.cfg.n_colors
        is_obj = (tokens > 0) & (tokens < self.cfg.mask_id)
        kind = torch.where(tokens == self.cfg.mask_id, 2, is_obj.long())
        code = (tokens - 1).clamp(min=0)
        obj = self.shape_emb(code // C % self.cfg.n_shapes) + self.color_emb(code % C)
        return self.kind(kind) + obj * is_obj[..., None] + self.row_emb(self.rows) + self.col_emb(self.cols)

    def context(self, text: torch.Tensor, text_mask: torch.Tensor,
                drop: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """What every block reads of the prompt, whatever the image tokens: each block's context keys and values
        (layers, 2, B, heads, 1 + L, D / heads) and which context tokens are attended (B, 1 + L). The same at every
        decoding step, so a sampler computes it once per decoding (`forward`'s context)."""
        B = len(text)
        if drop is not None:
            text_mask = text_mask & ~drop[:, None]
        ctx = self.ctx_norm(torch.cat([self.null.expand(B, 1, -1), self.text_proj(text)], 1))
        kv = torch.stack([block.context_kv(ctx) for block in self.blocks])
        return kv, torch.cat([torch.ones(B, 1, dtype=torch.bool, device=text.device), text_mask], 1)

    def forward(self, tokens: torch.Tensor, text: torch.Tensor | None, text_mask: torch.Tensor | None,
                drop: torch.Tensor | None = None,
                context: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """tokens (B, N) with [MASK] = cfg.mask_id; text (B, L, text_dim); text_mask (B, L) of real tokens;
        drop (B,) bool replaces the prompt by the null prompt; or instead of the three, their `context`.
        Returns logits (B, N, vocab_size)."""
        B, N = tokens.shape
        kv, ctx_mask = self.context(text, text_mask, drop) if context is None else context
        attend = torch.cat([ctx_mask, torch.ones(B, N, dtype=torch.bool, device=tokens.device)], 1)
        x = self.embed_tokens(tokens)
        for block, ctx_kv in zip(self.blocks, kv, strict=True):
            x = block(x, ctx_kv, attend)
        h = self.head(self.norm(x))
        empty, shape, color = h.split([1, self.cfg.n_shapes, self.cfg.n_colors], -1)
        objects = (shape[..., :, None] + color[..., None, :]).flatten(-2)
        return torch.cat([empty, objects], -1)

    def guided_context(self, text: torch.Tensor, text_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The `context` of guided_logits' batch: the B prompts, then the B null prompts."""
        drop = torch.arange(2 * len(text), device=text.device) >= len(text)
        return self.context(text.repeat(2, 1, 1), text_mask.repeat(2, 1), drop)

    def guided_logits(self, tokens: torch.Tensor, text: torch.Tensor | None, text_mask: torch.Tensor | None,
                      cfg_scale: torch.Tensor,
                      context: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """l_u + w (l_c − l_u) from one batched forward; cfg_scale (B,); the prompts as text and text_mask, or as
        their `guided_context`."""
        B = len(tokens)
        logits = self(tokens.repeat(2, 1), None, None,
                      context=self.guided_context(text, text_mask) if context is None else context)
        cond, uncond = logits[:B], logits[B:]
        return uncond + cfg_scale[:, None, None] * (cond - uncond)

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, folder / "model.safetensors")
        (folder / "config.json").write_text(json.dumps(asdict(self.cfg), indent=1))

    @classmethod
    def load(cls, folder: str | Path) -> "MDM":
        folder = Path(folder)
        for f in ("config.json", "model.safetensors"):
            if not (folder / f).is_file():
                raise FileNotFoundError(f"{folder / f}: missing model file")
        try:
            model = cls(MDMConfig(**json.loads((folder / "config.json").read_text())))
        except (ValueError, TypeError) as err:
            raise InputError(f"{folder / 'config.json'}: not an MDM config ({type(err).__name__}: {err})") from None
        try:
            state = load_file(folder / "model.safetensors")
        except Exception as err:  # safetensors raises its own error type for a torn file
            raise InputError(f"{folder / 'model.safetensors'}: unreadable ({type(err).__name__}: {err})") from None
        mine = model.state_dict()
        for k, v in mine.items():
            if k not in state:
                raise InputError(f"{folder / 'model.safetensors'}: missing tensor '{k}' required by config.json")
            if state[k].shape != v.shape:
                raise InputError(f"{folder / 'model.safetensors'}: tensor '{k}' has shape {tuple(state[k].shape)}, "
                                 f"config.json implies {tuple(v.shape)}")
        extra = sorted(set(state) - set(mine))
        if extra:
            raise InputError(f"{folder / 'model.safetensors'}: unexpected tensor '{extra[0]}' for config.json")
        require_finite(state.items(), str(folder / 'model.safetensors'))
        model.load_state_dict(state)
        return model.eval()
