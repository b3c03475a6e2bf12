"""A pretrained backbone's snapshot folder (aMUSEd, Meissonic): where it is, whether it is whole, what it holds.

Both are laid out as their hubs publish them: transformer/, vqvae/, text_encoder/, tokenizer/, scheduler/ and
model_index.json. `snapshot_folder` resolves model.pretrained (a folder, or a hub id where the hub is reachable);
`check_weights` compares a transformer's weight file with the state dict its config builds, before loading it.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

from cogrpo.errors import InputError

PARTS = ("transformer", "vqvae", "text_encoder", "tokenizer", "scheduler")
ADAPTERS = "adapters.safetensors"
# model.backbone → (a snapshot of it, in messages; the hub id whose layout a snapshot follows)
HUB = {"amused": ("an aMUSEd", "amused/amused-256"), "meissonic": ("a Meissonic", "MeissonFlow/Meissonic")}


def snapshot_folder(pretrained: str, backbone: str) -> Path:
    """model.pretrained as a local snapshot folder: the folder itself, or the hub's cached or downloaded copy of
    an id. Fails in seconds with one line when neither is there (no hub retry loop: offline is offline)."""
    path = Path(pretrained).expanduser()
    if not path.exists() and "/" in pretrained and not pretrained.startswith((".", "/", "~")):
        from huggingface_hub import snapshot_download

        try:
            path = Path(snapshot_download(pretrained, allow_patterns=[f"{p}/*" for p in PARTS] + ["model_index.json"]))
        except Exception as err:  # offline, unknown id, no access: all end here
            raise InputError(f"model.pretrained = {pretrained!r}: not a local folder, and the hub copy is not "
                             f"available ({type(err).__name__}); download it first, e.g. `hf download {pretrained} "
                             f"--local-dir models/{pretrained.split('/')[-1]}`, and give that folder") from None
    missing = [p for p in PARTS if not (path / p).is_dir()]
    if not path.is_dir() or missing:
        name, example = HUB[backbone]
        raise InputError(f"model.pretrained = {pretrained!r}: not {name} snapshot folder (missing "
                         f"{', '.join(missing or PARTS)}/); give a folder laid out like the hub's {example}")
    return path


def has_trained_weights(folder: Path) -> bool:
    """Whether folder holds what a generator's `save_trained` writes (adapters, or a whole transformer)."""
    return (folder / ADAPTERS).is_file() or (folder / "config.json").is_file()


def mask_token_id(folder: Path) -> int:
    """The [MASK] id of the snapshot's scheduler config (AmusedScheduler's and Meissonic's `mask_token_id`)."""
    path = folder / "scheduler" / "scheduler_config.json"
    try:
        return int(json.loads(path.read_text())["mask_token_id"])
    except (OSError, ValueError, KeyError, TypeError) as err:  # absent, not JSON, no key, not a number
        raise InputError(f"{path}: no integer mask_token_id ({type(err).__name__}: {err})") from None


def weight_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor in a diffusers model folder's safetensors (one file, or shards with an index),
    read from the headers alone."""
    from safetensors import safe_open

    index = folder / "diffusion_pytorch_model.safetensors.index.json"
    files = (sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()}) if index.is_file()
             else [folder / "diffusion_pytorch_model.safetensors"])
    shapes = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            shapes |= {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    return shapes


def check_weights(model_class: type, folder: Path, pretrained: str) -> None:
    """Every weight the model its config.json builds expects is in folder's files, with its shape: missing or
    misshapen weights stop with one line naming them and model.pretrained; weights the model does not know are
    warned about (the loader ignores them)."""
    from safetensors import SafetensorError

    part = f"{folder.parent.name}/{folder.name}"
    try:
        config = model_class.load_config(folder)
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in model_class.from_config(config).state_dict().items()}
        found = weight_shapes(folder)
    except (OSError, ValueError, KeyError, TypeError, SafetensorError) as err:  # SafetensorError: a torn file
        raise InputError(f"model.pretrained = {pretrained!r}: {part} cannot be read ({type(err).__name__}: "
                         f"{err})") from None
    missing = sorted(set(expected) - set(found))
    wrong = sorted(f"{k} {found[k]} (config: {expected[k]})" for k in set(expected) & set(found)
                   if found[k] != expected[k])
    if missing or wrong:
        listed = [f"missing {_some(missing)}"] * bool(missing) + [f"misshapen {_some(wrong)}"] * bool(wrong)
        raise InputError(f"model.pretrained = {pretrained!r}: {part} does not fit its config.json: "
                         + "; ".join(listed))
    unknown = sorted(set(found) - set(expected))
    if unknown:
        warnings.warn(f"model.pretrained = {pretrained!r}: {part} holds weights the model does not use, ignored: "
                      f"{_some(unknown)}", stacklevel=2)


def _some(names: list[str], most: int = 5) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")
