"""A tiny random-weight Meissonic snapshot in the published hub layout (MeissonFlow/Meissonic), made offline.

    python -m cogrpo.backbones.tiny_meissonic models/tiny-meissonic     # ~1 MB, a few seconds

The folders are the published ones: `transformer/` (our MeissonicTransformer, its config.json written under the
published class name "Transformer2DModel"), `vqvae/` (diffusers' VQModel), `text_encoder/` (transformers'
CLIPTextModelWithProjection), `tokenizer/` (a byte-level CLIP BPE built offline, as tiny_amused does),
`scheduler/` (the two fields the authors' Scheduler reads: mask_token_id = vocab_size − 1, masking_schedule
"cosine") and `model_index.json`. Shapes: 8×8 VQ tokens of 16×16 px images, downsampled to a 4×4 grid inside the
transformer (the published model: 64×64 of 1024 px, 32×32 inside); text padded to 77 tokens as the authors'
pipeline hard-codes; every width 32. The published widths are in meissonic_transformer's docstring.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from cogrpo.backbones.meissonic import TEXT_TOKENS
from cogrpo.backbones.meissonic_transformer import PUBLISHED_CLASS
from cogrpo.backbones.tiny_amused import CODEBOOK, SCALE, SIDE, WIDTH, write_clip_tokenizer

TRANSFORMER = dict(num_layers=2, num_single_layers=2, attention_head_dim=16, num_attention_heads=2,
                   joint_attention_dim=WIDTH, pooled_projection_dim=WIDTH, axes_dims_rope=[4, 6, 6],
                   vocab_size=CODEBOOK + 1, codebook_size=CODEBOOK, downsample=True, upsample=True)
VQVAE = dict(act_fn="silu", block_out_channels=[16] * SCALE, down_block_types=["DownEncoderBlock2D"] * SCALE,
             up_block_types=["UpDecoderBlock2D"] * SCALE, in_channels=3, out_channels=3, latent_channels=8,
             layers_per_block=1, norm_num_groups=8, num_vq_embeddings=CODEBOOK, sample_size=SIDE * SCALE,
             mid_block_add_attention=False, lookup_from_codebook=True, force_upcast=False)


def make_tiny_meissonic(folder: str | Path, seed: int = 0) -> Path:
    """Write the snapshot into folder and return it."""
    from diffusers import VQModel
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, CLIPTokenizer

    from cogrpo.backbones.meissonic_transformer import MeissonicTransformer, save_published

    folder = Path(folder)
    write_clip_tokenizer(folder / "tokenizer", max_length=TEXT_TOKENS)
    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        # text width = joint_attention_dim (hidden states) = pooled_projection_dim (projected pooled embedding)
        text = CLIPTextModelWithProjection(CLIPTextConfig(
            vocab_size=len(tokenizer), hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=2,
            num_attention_heads=2, projection_dim=WIDTH, max_position_embeddings=TEXT_TOKENS,
            bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id))
        transformer = MeissonicTransformer(**TRANSFORMER)
        vqvae = VQModel(**VQVAE)
        with torch.no_grad():  # as tiny_amused: spread codes and a decoder whose colours span the RGB cube
            vqvae.quantize.embedding.weight.normal_(0, 1)
            vqvae.decoder.conv_out.weight.mul_(4)
            vqvae.decoder.conv_out.bias.zero_()
    text.save_pretrained(folder / "text_encoder")
    vqvae.save_pretrained(folder / "vqvae")
    save_published(transformer, folder / "transformer")  # config.json names the hub's class
    (folder / "scheduler").mkdir(parents=True, exist_ok=True)
    (folder / "scheduler" / "scheduler_config.json").write_text(json.dumps({
        "_class_name": "Scheduler", "mask_token_id": TRANSFORMER["vocab_size"] - 1,
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
    args = ap.parse_args()
    print(make_tiny_meissonic(args.folder, args.seed))
