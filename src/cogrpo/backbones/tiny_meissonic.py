"""A random-weight Meissonic snapshot in the published hub layout (MeissonFlow/Meissonic), made offline: tiny, or
at the published shapes.

    python -m cogrpo.backbones.tiny_meissonic models/tiny-meissonic     # ~1 MB, a few seconds
    python -m cogrpo.backbones.tiny_meissonic models/random-meissonic --size published   # ~6 GB: for measuring

The folders are the published ones: `transformer/` (our MeissonicTransformer, its config.json written under the
published class name "Transformer2DModel"), `vqvae/` (diffusers' VQModel), `text_encoder/` (transformers'
CLIPTextModelWithProjection), `tokenizer/` (a byte-level CLIP BPE built offline, as tiny_amused does),
`scheduler/` (the two fields the authors' Scheduler reads: mask_token_id = vocab_size − 1, masking_schedule
"cosine") and `model_index.json`. The VQ-GAN and the text tower are tiny_amused's. Shapes: 8×8 VQ tokens of
16×16 px images, downsampled to a 4×4 grid inside the transformer (the published model: 64×64 of 1024 px, 32×32
inside); text padded to 77 tokens as the authors' pipeline hard-codes, while the tokenizer's own model_max_length
is 64, so that a generator reading the tokenizer's length instead shows; every width 32. The published widths
are in meissonic_transformer's docstring.

`published` has the published shapes with random weights, for time and memory (bench/meissonic_cost.py) without
a download: the transformer of MeissonFlow/Meissonic's transformer/config.json (MeissonicTransformer's defaults,
about 1.0 B parameters), the text tower of CLIP-ViT-H-14 (laion2B: width 1024, 24 layers, 16 heads, projection
1024; about 354 M) and the VQ-GAN of aMUSEd (tiny_amused's published one: 8192 codes, 16× downsampling, which is
what Meissonic's 1024 px → 64×64 grid and vocab_size 8256 = 8192 + 64 imply); the tokenizer stays the tiny
byte-level one (its vocabulary does not change a forward's cost; the text tower keeps CLIP's 49408 embeddings).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from cogrpo.backbones.meissonic import TEXT_TOKENS
from cogrpo.backbones.meissonic_transformer import PUBLISHED_CLASS
from cogrpo.backbones.tiny_amused import (CODEBOOK, PUBLISHED_VQVAE, TINY_TEXT, TINY_VQVAE, WIDTH,
                                          clip_text_encoder, spread_codes, write_clip_tokenizer)

TOKENIZER_MAX_LENGTH = 64  # not TEXT_TOKENS: see the module docstring
TRANSFORMER = dict(num_layers=2, num_single_layers=2, attention_head_dim=16, num_attention_heads=2,
                   joint_attention_dim=WIDTH, pooled_projection_dim=WIDTH, axes_dims_rope=[4, 6, 6],
                   vocab_size=CODEBOOK + 1, codebook_size=CODEBOOK, downsample=True, upsample=True)

# CLIP-ViT-H-14's text tower (laion/CLIP-ViT-H-14-laion2B-s32B-b79K, with projection), Meissonic's text encoder
PUBLISHED_TEXT = dict(vocab_size=49408, hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                      num_attention_heads=16, projection_dim=1024, hidden_act="gelu")
SIZES = ("tiny", "published")


def make_tiny_meissonic(folder: str | Path, seed: int = 0, size: str = "tiny", **overrides) -> Path:
    """Write the snapshot into folder and return it: size 'tiny' or 'published'; `overrides` replace fields of its
    transformer config (e.g. fewer blocks at the published widths)."""
    from diffusers import VQModel
    from transformers import CLIPTokenizer

    from cogrpo.backbones.meissonic_transformer import MeissonicTransformer, save_published

    if size not in SIZES:
        raise ValueError(f"size {size!r}: one of {SIZES}")
    tiny = size == "tiny"
    folder = Path(folder)
    write_clip_tokenizer(folder / "tokenizer", max_length=TOKENIZER_MAX_LENGTH if tiny else TEXT_TOKENS)
    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    # text width = joint_attention_dim (hidden states) = pooled_projection_dim (projected pooled embedding)
    text_cfg = TINY_TEXT if tiny else PUBLISHED_TEXT
    transformer_cfg = (TRANSFORMER if tiny else {}) | overrides  # published: MeissonicTransformer's defaults
    vqvae_cfg = TINY_VQVAE if tiny else PUBLISHED_VQVAE
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        text = clip_text_encoder(tokenizer, **text_cfg, max_position_embeddings=TEXT_TOKENS)
        transformer = MeissonicTransformer(**transformer_cfg)
        vqvae = VQModel(**vqvae_cfg)
        if tiny:
            spread_codes(vqvae)
    text.save_pretrained(folder / "text_encoder")
    vqvae.save_pretrained(folder / "vqvae")
    save_published(transformer, folder / "transformer")  # config.json names the hub's class
    (folder / "scheduler").mkdir(parents=True, exist_ok=True)
    (folder / "scheduler" / "scheduler_config.json").write_text(json.dumps({
        "_class_name": "Scheduler", "mask_token_id": transformer.config.vocab_size - 1,
        "masking_schedule": "cosine"}, indent=2) + "\n")
    # the published index names the authors' remote-code modules (transformer/transformer.py,
    # scheduler/scheduler.py); cogrpo loads each part itself and never reads these entries
    (folder / "model_index.json").write_text(json.dumps({
        "_class_name": "Pipeline", "scheduler": ["scheduler", "Scheduler"],
        "text_encoder": ["transformers", "CLIPTextModelWithProjection"], "tokenizer": ["transformers", "CLIPTokenizer"],
        "transformer": ["transformer", PUBLISHED_CLASS], "vqvae": ["diffusers", "VQModel"]}, indent=2) + "\n")
    return folder


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", choices=SIZES, default="tiny")
    args = ap.parse_args()
    print(make_tiny_meissonic(args.folder, args.seed, args.size))
