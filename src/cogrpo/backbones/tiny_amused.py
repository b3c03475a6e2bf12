"""Random-weight aMUSEd snapshots in the hub layout, made offline: tiny, or at the published sizes.

The architectures are aMUSEd's (diffusers' UVit2DModel, VQModel and AmusedScheduler; transformers'
CLIPTextModelWithProjection and CLIPTokenizer). `tiny` is a few thousand times smaller than amused-256: what the
tests and the CPU demo load through exactly the code path real weights take. `256` and `512` have the published
shapes (UVit2DModel's defaults, which are aMUSEd's transformer, on 16×16 or, downsampled, 32×32 tokens; the VQ-GAN
of diffusers' scripts/convert_amused.py; CLIP ViT-L/14's text tower) with random weights: for measuring time and
memory on a GPU without downloading anything. The CLIP tokenizer is a byte-level BPE whose vocabulary is the 256
byte symbols (each also as a word end) and a handful of merges: real CLIP tokenization rules, tiny vocabulary.

    python -m cogrpo.backbones.tiny_amused models/tiny-amused              # ~1 MB, a few seconds
    python -m cogrpo.backbones.tiny_amused models/random-amused-256 --size 256   # a few GB: for a GPU machine
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

SIDE = 8  # latent tokens per side
SCALE = 2  # VQ-GAN downscale: images are SIDE·SCALE pixels square
CODEBOOK = 64
WIDTH = 32


def _bytes_to_unicode() -> list[str]:
    """GPT-2/CLIP's printable stand-ins for the 256 byte values."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    extra = [b for b in range(256) if b not in keep]
    return [chr(b) for b in keep] + [chr(256 + i) for i in range(len(extra))]


def write_clip_tokenizer(folder: Path, max_length: int) -> None:
    symbols = _bytes_to_unicode()
    merges = [("t", "h"), ("th", "e</w>"), ("a", "n"), ("r", "e"), ("e", "d</w>")]
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({tok: i for i, tok in enumerate(vocab)}, ensure_ascii=False))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "CLIPTokenizer", "model_max_length": max_length, "bos_token": "<|startoftext|>",
        "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "do_lower_case": True}))


# the tiny VQ-GAN and CLIP text tower, shared with tiny_meissonic (the text tower's vocabulary and positions come
# from its tokenizer and prompt length)
TINY_VQVAE = dict(act_fn="silu", block_out_channels=[16] * SCALE, down_block_types=["DownEncoderBlock2D"] * SCALE,
                  up_block_types=["UpDecoderBlock2D"] * SCALE, in_channels=3, out_channels=3, latent_channels=8,
                  layers_per_block=1, norm_num_groups=8, num_vq_embeddings=CODEBOOK, sample_size=SIDE * SCALE,
                  mid_block_add_attention=False, lookup_from_codebook=True, force_upcast=False)
TINY_TEXT = dict(hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=2, num_attention_heads=2,
                 projection_dim=WIDTH)


def clip_text_encoder(tokenizer, **config):
    """A random CLIPTextModelWithProjection with the tokenizer's special ids and, unless config names one, its
    vocabulary size."""
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    return CLIPTextModelWithProjection(CLIPTextConfig(
        **{"vocab_size": len(tokenizer), **config}, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id))


def spread_codes(vqvae) -> None:
    """Codes spread like a trained codebook's, and a decoder whose colours span the RGB cube: different tokens
    decode to visibly different images (a random init decodes everything grey-green)."""
    with torch.no_grad():
        vqvae.quantize.embedding.weight.normal_(0, 1)
        vqvae.decoder.conv_out.weight.mul_(4)
        vqvae.decoder.conv_out.bias.zero_()


def _tiny_parts(max_length: int) -> tuple[dict, dict, dict]:
    text = dict(TINY_TEXT, max_position_embeddings=max_length)
    transformer = dict(hidden_size=WIDTH, use_bias=False, hidden_dropout=0.0, cond_embed_dim=WIDTH,
                       micro_cond_encode_dim=2, micro_cond_embed_dim=10, encoder_hidden_size=WIDTH,
                       vocab_size=CODEBOOK + 1, codebook_size=CODEBOOK, in_channels=WIDTH, block_out_channels=WIDTH,
                       num_res_blocks=1, downsample=False, upsample=False, block_num_heads=2, num_hidden_layers=2,
                       num_attention_heads=2, attention_dropout=0.0, intermediate_size=2 * WIDTH,
                       layer_norm_eps=1e-6, ln_elementwise_affine=True, sample_size=SIDE)
    return text, transformer, TINY_VQVAE


# aMUSEd's VQ-GAN (diffusers' scripts/convert_amused.py), shared with tiny_meissonic's published size
PUBLISHED_VQVAE = dict(act_fn="silu", block_out_channels=[128, 256, 256, 512, 768],
                       down_block_types=["DownEncoderBlock2D"] * 5, up_block_types=["UpDecoderBlock2D"] * 5,
                       in_channels=3, out_channels=3, latent_channels=64, layers_per_block=2, norm_num_groups=32,
                       num_vq_embeddings=8192, sample_size=32, mid_block_add_attention=False, lookup_from_codebook=True)


def _published_parts(size: int) -> tuple[dict, dict, dict]:
    text = dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                num_attention_heads=12, projection_dim=768, max_position_embeddings=77)
    down = size == 512
    transformer = dict(sample_size=size // 16, downsample=down, upsample=down)  # the rest: UVit2DModel's defaults
    return text, transformer, PUBLISHED_VQVAE


def make_tiny_amused(folder: str | Path, seed: int = 0, size: str = "tiny") -> Path:
    """A random-weight aMUSEd snapshot in folder: size 'tiny', '256' or '512'."""
    from diffusers import AmusedScheduler, UVit2DModel, VQModel
    from transformers import CLIPTokenizer

    folder = Path(folder)
    write_clip_tokenizer(folder / "tokenizer", max_length=16 if size == "tiny" else 77)
    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    text_cfg, transformer_cfg, vqvae_cfg = (_tiny_parts(tokenizer.model_max_length) if size == "tiny"
                                            else _published_parts(int(size)))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        text = clip_text_encoder(tokenizer, **text_cfg)
        transformer = UVit2DModel(**transformer_cfg)
        vqvae = VQModel(**vqvae_cfg)
        if size == "tiny":
            spread_codes(vqvae)
    text.save_pretrained(folder / "text_encoder")
    transformer.save_pretrained(folder / "transformer")
    vqvae.save_pretrained(folder / "vqvae")
    # the mask is the last token id: 8255 of aMUSEd's 8256
    AmusedScheduler(mask_token_id=transformer.config.vocab_size - 1, masking_schedule="cosine").save_pretrained(
        folder / "scheduler")
    (folder / "model_index.json").write_text(json.dumps({
        "_class_name": "AmusedPipeline", "scheduler": ["diffusers", "AmusedScheduler"],
        "text_encoder": ["transformers", "CLIPTextModelWithProjection"], "tokenizer": ["transformers", "CLIPTokenizer"],
        "transformer": ["diffusers", "UVit2DModel"], "vqvae": ["diffusers", "VQModel"]}, indent=1))
    return folder


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", choices=["tiny", "256", "512"], default="tiny")
    args = ap.parse_args()
    print(make_tiny_amused(args.folder, args.seed, args.size))
