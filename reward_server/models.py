"""The reward models, each loaded and run by its own package's code (this module runs in .venv-reward only).

    imagereward   ImageReward.load (BLIP + MLP head); scores by ImageReward.score_gard, the package's batched
                  forward (its `score(prompt, image)` runs the same forward one image at a time)
    hpsv2         hpsv2's vendored open_clip: create_model_and_transforms(arch) with the HPS checkpoint's
                  'state_dict' loaded strictly, as hpsv2.score does; score = diag(image_features @ text_features.T)
                  under CUDA autocast as there (on the CPU autocast is off, as there)
    clip          the same open_clip code with a plain CLIP checkpoint: 100 · cosine(image, text), the CLIP score

Simplified against the packages' own entry points, on purpose: hpsv2.score always downloads the LAION weights
first (the HPS checkpoint then overwrites all of them), so the model is built without them; ImageReward.load
loads with strict=False (a wrong file scores garbage silently), so the keys are checked here first.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch
from PIL import Image


class ConfigError(Exception):
    """A reward that cannot be loaded: the message names the reward, the file and how to supply it."""


def _require_file(reward: str, key: str, path: str | None, where: str) -> Path:
    if not path or not Path(path).is_file():
        raise ConfigError(f"{reward}: {key} {path!r} is not a file; {where}")
    return Path(path)


def _short_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _check_keys(reward: str, path: Path, expected: set[str], found: set[str]) -> None:
    # position_ids are fixed aranges that some transformers versions keep in the state dict and others do not
    missing = sorted(k for k in expected - found if not k.endswith("position_ids"))
    unexpected = sorted(k for k in found - expected if not k.endswith("position_ids"))
    if missing or unexpected:
        raise ConfigError(f"{reward}: {path} is not a checkpoint of this model: {len(missing)} weights missing "
                          f"(e.g. {missing[:3]}), {len(unexpected)} unknown (e.g. {unexpected[:3]})")


def use_bert_tokenizer(folder: str) -> None:
    """BLIP loads its tokenizer as BertTokenizer.from_pretrained('bert-base-uncased'), by name, and a folder of
    that name in the working directory wins over the hub: so work in a scratch directory holding one, a link to
    `folder`. (Paths handed to this process are absolute: adapters/reward_server.py resolves them.)"""
    folder = Path(folder).resolve()
    if not (folder / "vocab.txt").is_file():
        raise ConfigError(f"imagereward: bert_tokenizer {str(folder)!r} has no vocab.txt (bert-base-uncased's)")
    scratch = Path(tempfile.mkdtemp(prefix="reward-server-"))
    (scratch / "bert-base-uncased").symlink_to(folder, target_is_directory=True)
    os.chdir(scratch)


def register_arch(arch: str) -> str:
    """An open_clip model name, or a model config JSON file registered with hpsv2's open_clip under its stem."""
    from hpsv2.src.open_clip import add_model_config

    if arch.endswith(".json"):
        add_model_config(Path(arch))
        return Path(arch).stem
    return arch


def _images(pixels: np.ndarray) -> list[Image.Image]:
    return [Image.fromarray(img) for img in pixels]


class ImageRewardModel:
    IR_URL = "https://huggingface.co/THUDM/ImageReward (ImageReward.pt and med_config.json)"

    def __init__(self, checkpoint: str, med_config: str, device: str, bert_tokenizer: str | None = None):
        import ImageReward as RM

        ckpt = _require_file("imagereward", "checkpoint", checkpoint, f"download it from {self.IR_URL}")
        med = _require_file("imagereward", "med_config", med_config, f"download it from {self.IR_URL}")
        if bert_tokenizer:
            use_bert_tokenizer(bert_tokenizer)
        found = set(torch.load(ckpt, map_location="cpu", mmap=True, weights_only=True))
        try:
            self.model = RM.load(str(ckpt), device=device, med_config=str(med))
        except OSError as exc:  # the BERT vocabulary, offline
            raise ConfigError(f"imagereward: BLIP's tokenizer 'bert-base-uncased' cannot be loaded ({exc}); set "
                              "bert_tokenizer to a folder with its vocab.txt, or run once online") from exc
        _check_keys("imagereward", ckpt, set(self.model.state_dict()), found)
        self.device = device
        self.info = {"package": f"image-reward {version('image-reward')}", "checkpoint": str(ckpt),
                     "sha256": _short_sha256(ckpt), "med_config": str(med)}

    @torch.no_grad()
    def score(self, prompts: list[str], pixels: np.ndarray) -> list[float]:
        m = self.model
        text = m.blip.tokenizer(prompts, padding="max_length", truncation=True, max_length=35,  # as m.score
                                return_tensors="pt").to(self.device)
        images = torch.stack([m.preprocess(img) for img in _images(pixels)]).to(self.device)
        return m.score_gard(text.input_ids, text.attention_mask, images).float().flatten().tolist()


class OpenClipModel:
    """HPS v2.x (an open_clip model fine-tuned on human preferences) and a plain CLIP score share this code."""

    HPS_FILES = {"v2.0": "HPS_v2_compressed.pt", "v2.1": "HPS_v2.1_compressed.pt"}

    def __init__(self, reward: str, checkpoint: str, arch: str, device: str, scale: float, normalize_text=True):
        from hpsv2.src.open_clip import create_model_and_transforms, get_tokenizer

        where = (f"download {self.HPS_FILES[reward.split('_')[1]]} from https://huggingface.co/xswu/HPSv2"
                 if reward.startswith("hpsv2") else "an open_clip checkpoint of that arch (state dict)")
        ckpt = _require_file(reward, "checkpoint", checkpoint, where)
        # the arguments hpsv2.img_score.initialize_model passes, less the LAION download
        self.model, _, self.preprocess = create_model_and_transforms(
            register_arch(arch), None, precision="amp", device=device, jit=False, force_quick_gelu=False, force_custom_text=False,
            force_patch_dropout=False, force_image_size=None, pretrained_image=False, image_mean=None, image_std=None,
            light_augmentation=True, aug_cfg={}, output_dict=True, with_score_predictor=False,
            with_region_predictor=False)
        state = torch.load(ckpt, map_location=device, weights_only=False)
        state = state.get("state_dict", state) if isinstance(state, dict) else state
        _check_keys(reward, ckpt, set(self.model.state_dict()), set(state))
        self.model.load_state_dict(state)
        self.model.eval()
        self.tokenizer, self.device, self.scale = get_tokenizer(register_arch(arch)), device, scale
        self.info = {"package": f"hpsv2x {version('hpsv2x')}", "arch": arch, "checkpoint": str(ckpt),
                     "sha256": _short_sha256(ckpt)}

    @torch.no_grad()
    def score(self, prompts: list[str], pixels: np.ndarray) -> list[float]:
        images = torch.stack([self.preprocess(img) for img in _images(pixels)]).to(self.device)
        text = self.tokenizer(prompts).to(self.device)
        amp = torch.autocast("cuda") if self.device.startswith("cuda") else contextlib.nullcontext()
        with amp:
            out = self.model(images, text)
            cosine = (out["image_features"] * out["text_features"]).sum(-1)  # = diag(I @ T.T), row by row
        return (self.scale * cosine.float()).tolist()


def pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def load_all(config: dict) -> dict:
    """{reward name: model} from the server's config (what `adapters/reward_server.py` writes):
        {"device": "auto", "imagereward": {"checkpoint", "med_config", "bert_tokenizer"},
         "hpsv2": {"v2.0": checkpoint, "v2.1": checkpoint, "arch": "ViT-H-14"}, "clip": {"checkpoint", "arch"}}
    hpsv2 versions are served as 'hpsv2_v2.0' and 'hpsv2_v2.1'."""
    device, models = pick_device(config.get("device", "auto")), {}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if "imagereward" in config:
        c = config["imagereward"]
        models["imagereward"] = ImageRewardModel(c.get("checkpoint"), c.get("med_config"), device,
                                                 c.get("bert_tokenizer"))
    hps = config.get("hpsv2") or {}
    for v in ("v2.0", "v2.1"):
        if hps.get(v):
            models[f"hpsv2_{v}"] = OpenClipModel(f"hpsv2_{v}", hps[v], hps.get("arch", "ViT-H-14"), device, 1.0)
    if "clip" in config:
        c = config["clip"]
        models["clip"] = OpenClipModel("clip", c.get("checkpoint"), c.get("arch", "ViT-H-14"), device, 100.0)
    return models
