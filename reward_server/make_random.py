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
    with bert_tokenizer_here(str(bert_tokenizer) if bert_tokenizer else None):
        model = ImageReward(med_config=str(out / "med_config.json"), device="cpu")
    for layer in model.mlp.layers:  # its init (std 1/769) gives every image the same score: spread it
        if isinstance(layer, torch.nn.Linear):
            torch.nn.init.normal_(layer.weight, std=layer.in_features**-0.5)
    torch.save(model.state_dict(), out / "ImageReward.pt")


def openclip(out: Path, arch: str, seed: int) -> Path:
    from hpsv2.src.open_clip import create_model

    out.mkdir(parents=True, exist_ok=True)
    name = register_arch(arch)
    torch.manual_seed(seed)
    model = create_model(name, None, precision="fp32", device="cpu")
    path = out / f"{name}.pt"
    torch.save({"state_dict": model.state_dict()}, path)
    return path


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
        args.out.mkdir(parents=True, exist_ok=True)
        shutil.copy(args.vocab, args.out / "vocab.txt")
        (args.out / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))


if __name__ == "__main__":
    main()
