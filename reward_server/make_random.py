"""Random-weight reward checkpoints in each package's own file format, made offline (in .venv-reward):

    python -m reward_server.make_random imagereward OUT [--text-layers 12] [--bert-tokenizer DIR]  # ImageReward.pt, med_config.json
    python -m reward_server.make_random openclip OUT [--arch ViT-H-14]      # OUT/<arch>.pt = {'state_dict': …}
    python -m reward_server.make_random bert-vocab OUT --vocab VOCAB.txt    # OUT/vocab.txt: BLIP's tokenizer folder

ImageReward's BLIP always has a ViT-L/16 (303 M params); its text side follows med_config.json, BLIP's
bert-base config (12 layers) unless --text-layers makes it shallower for tests. `--arch` is an open_clip model
name, or a JSON model config file (registered under its file stem) for a small model with ViT-H-14's tokenizer:
tests use reward_server/tiny_openclip.json. Plumbing checks, not scores anyone should read.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from accelerate import init_empty_weights

from reward_server.models import bert_tokenizer_here, register_arch

# BLIP's med_config.json (ImageReward's copy): bert-base-uncased plus the two tokens BLIP adds, with cross-attention
MED_CONFIG = {"architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
              "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
              "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 0, "type_vocab_size": 2,
              "vocab_size": 30524, "encoder_width": 768, "add_cross_attention": True}


def imagereward(out: Path, text_layers: int, seed: int, bert_tokenizer: Path | None) -> None:
    from ImageReward import ImageReward

    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "med_config.json").write_text(json.dumps(MED_CONFIG | {"num_hidden_layers": text_layers}, indent=1))
    torch.manual_seed(seed)
    # built on the meta device and filled below: ViT-L's own init (truncated normals) would cost most of the time
    tokenizer = str(bert_tokenizer) if bert_tokenizer else None
    with init_empty_weights(include_buffers=False), bert_tokenizer_here(tokenizer):
        model = ImageReward(med_config=str(out / "med_config.json"), device="cpu")
    _fill_like_bert(model)
    for layer in model.mlp.layers:  # std 0.02 would give every image nearly the same score: spread it
        if isinstance(layer, torch.nn.Linear):
            torch.nn.init.normal_(layer.weight, std=layer.in_features**-0.5)
    torch.save(model.state_dict(), out / "ImageReward.pt")


@torch.no_grad()
def _fill_like_bert(model: torch.nn.Module) -> None:
    """Real tensors for a meta-built model's parameters, as BERT initialises them: matrices, embeddings and ViT's
    tokens N(0, 0.02), norms' scales 1, every bias 0."""
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.is_meta:
                continue
            if p.dim() >= 2:
                value = torch.randn(p.shape) * 0.02
            elif isinstance(module, torch.nn.LayerNorm) and name == "weight":
                value = torch.ones(p.shape)
            else:
                value = torch.zeros(p.shape)
            setattr(module, name, torch.nn.Parameter(value, requires_grad=p.requires_grad))


def openclip(out: Path, arch: str, seed: int) -> Path:
    from hpsv2.src.open_clip import create_model

    out.mkdir(parents=True, exist_ok=True)
    name = register_arch(arch)
    torch.manual_seed(seed)
    model = create_model(name, None, precision="fp32", device="cpu")
    path = out / f"{name}.pt"
    torch.save({"state_dict": model.state_dict()}, path)
    return path


def bert_vocab(out: Path, vocab: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(vocab, out / "vocab.txt")
    (out / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["imagereward", "openclip", "bert-vocab"])
    ap.add_argument("out", type=Path)
    ap.add_argument("--text-layers", type=int, default=12)
    ap.add_argument("--arch", default="ViT-H-14")
    ap.add_argument("--vocab", type=Path, help="bert-base-uncased's vocab.txt (30,522 WordPiece entries)")
    ap.add_argument("--bert-tokenizer", type=Path, help="imagereward offline: a folder with that vocab.txt")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.kind == "imagereward":
        imagereward(args.out, args.text_layers, args.seed, args.bert_tokenizer)
    elif args.kind == "openclip":
        openclip(args.out, args.arch, args.seed)
    else:
        bert_vocab(args.out, args.vocab)


if __name__ == "__main__":
    main()
