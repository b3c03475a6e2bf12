"""The reward models, each loaded and run by its own package's code (this module runs in .venv-reward only).

    imagereward   ImageReward (BLIP + MLP head) loaded as ImageReward.load does it; scores by
                  ImageReward.score_gard, the package's batched forward (its `score(prompt, image)` runs the same
                  forward one image at a time)
    hpsv2         hpsv2's vendored open_clip: create_model_and_transforms(arch) with the HPS checkpoint's
                  'state_dict' loaded strictly, as hpsv2.score does; score = diag(image_features @ text_features.T)
                  under CUDA autocast as there (on the CPU autocast is off, as there); hpsv2.score takes one image
                  at a time, the server a batch (the same per image up to float rounding: ≤ 1e-5 on the CPU)
    clip          the same open_clip code with a plain CLIP checkpoint: 100 · max(cosine(image, text), 0), the CLIP score

Simplified against the packages' own entry points, on purpose: hpsv2.score always downloads the LAION weights
first (the HPS checkpoint then overwrites all of them), so the model is built without them; ImageReward.load
randomly initialises the model it then loads (skipped here) and loads with strict=False (a wrong file scores
garbage silently), so names and shapes are checked here.
Any failure to load is a ConfigError: one line naming the reward and the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
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


@contextlib.contextmanager
def _without_init():
    """Modules built here get their weights on the meta device, not initialised (buffers stay real): the model is
    loaded from its checkpoint right after, `load_state_dict(assign=True)` once `_check_state` found every weight,
    so the random init of ImageReward's ViT-L on the CPU (18 s of a 19-s load here) is work thrown away. (open_clip's
    create_model moves the model to its device as it builds it, which a meta model cannot do: HPS keeps its init.)"""
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        yield


def _check_state(reward: str, path: Path, expected: dict, found: dict, strict: bool) -> None:
    """Names and shapes of the checkpoint against the model's. Missing or misshapen weights would be scored with
    their random init (ImageReward.load's strict=False lets that pass): an error. Unknown extra entries change
    nothing that is scored: an error where the package itself loads strictly (HPS), a warning otherwise."""
    skip = lambda k: k.endswith("position_ids")  # noqa: E731  fixed aranges some transformers versions keep
    missing = sorted(k for k in expected.keys() - found.keys() if not skip(k))
    unknown = sorted(k for k in found.keys() - expected.keys() if not skip(k))
    misshapen = sorted(k for k in expected.keys() & found.keys()
                       if tuple(expected[k].shape) != tuple(getattr(found[k], "shape", ())))
    if missing or misshapen or (strict and unknown):
        raise ConfigError(f"{reward}: {path} is not a checkpoint of this model: {len(missing)} weights missing "
                          f"(e.g. {missing[:3]}), {len(misshapen)} of another shape (e.g. {misshapen[:3]}), "
                          f"{len(unknown)} unknown (e.g. {unknown[:3]})")
    if unknown:
        print(f"reward server: {reward}: {path}: {len(unknown)} entries this model does not use, ignored "
              f"(e.g. {unknown[:3]})", file=sys.stderr)


@contextlib.contextmanager
def bert_tokenizer_here(folder: str | None):
    """BLIP loads its tokenizer as BertTokenizer.from_pretrained('bert-base-uncased'), by name, and a folder of
    that name in the working directory wins over the hub: inside this block the working directory is a scratch
    one holding such a folder, a link to `folder` (None: nothing changes; the Hugging Face cache decides)."""
    if not folder:
        yield
        return
    folder = Path(folder).resolve()
    if not (folder / "vocab.txt").is_file():
        raise ConfigError(f"imagereward: bert_tokenizer {str(folder)!r} has no vocab.txt (bert-base-uncased's)")
    with tempfile.TemporaryDirectory(prefix="reward-server-") as scratch:
        (Path(scratch) / "bert-base-uncased").symlink_to(folder, target_is_directory=True)
        with contextlib.chdir(scratch):
            yield


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
        found = _load(ckpt, "imagereward", mmap=True)
        try:  # what ImageReward.load does (ImageReward(med_config) + load_state_dict), without its random init
            with bert_tokenizer_here(bert_tokenizer), _without_init():
                model = RM.ImageReward(med_config=str(med), device=device)
        except OSError as exc:  # the BERT vocabulary, offline
            raise ConfigError(f"imagereward: BLIP's tokenizer 'bert-base-uncased' cannot be loaded ({exc}); set "
                              "bert_tokenizer to a folder with its vocab.txt, or run once with HF_HUB_OFFLINE=0") from exc
        _check_state("imagereward", ckpt, model.state_dict(), found, strict=False)
        model.load_state_dict(found, strict=False, assign=True)
        self.model, self.device = model.to(device).eval(), device
        self.info = {"package": f"image-reward {version('image-reward')}", "checkpoint": str(ckpt),
                     "sha256": _short_sha256(ckpt), "med_config": str(med)}

    @torch.inference_mode()  # no autograd record, no version counters: scoring only
    def score(self, prompts: list[str], pixels: np.ndarray) -> list[float]:
        m = self.model
        text = m.blip.tokenizer(prompts, padding="max_length", truncation=True, max_length=35,  # as m.score
                                return_tensors="pt").to(self.device)
        images = torch.stack([m.preprocess(img) for img in _images(pixels)]).to(self.device)
        return m.score_gard(text.input_ids, text.attention_mask, images).float().flatten().tolist()


def _load(path: Path, reward: str, mmap: bool = False) -> dict:
    """A checkpoint's tensors (weights only: no code runs from the file); a truncated or foreign file is one line."""
    try:
        return torch.load(path, map_location="cpu", mmap=mmap, weights_only=True)
    except Exception as exc:  # truncated download, not a torch file, pickled code
        raise ConfigError(f"{reward}: {path} cannot be read as a checkpoint ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:200]})") from None


class OpenClipModel:
    """HPS v2.x (an open_clip model fine-tuned on human preferences) and a plain CLIP score share this code."""

    HPS_FILES = {"v2.0": "HPS_v2_compressed.pt", "v2.1": "HPS_v2.1_compressed.pt"}

    def __init__(self, reward: str, checkpoint: str, arch: str, device: str, scale: float, clamp: bool):
        from hpsv2.src.open_clip import create_model_and_transforms, get_tokenizer

        where = (f"download {self.HPS_FILES[reward.split('_')[1]]} from https://huggingface.co/xswu/HPSv2"
                 if reward.startswith("hpsv2") else "an open_clip checkpoint of that arch (state dict)")
        ckpt = _require_file(reward, "checkpoint", checkpoint, where)
        # the arguments hpsv2.img_score.initialize_model passes, less the LAION download; built and loaded on the
        # CPU, then moved: the device holds one copy of the weights, never a random one beside the checkpoint's
        self.model, _, self.preprocess = create_model_and_transforms(
            register_arch(arch), None, precision="amp", device="cpu", jit=False, force_quick_gelu=False, force_custom_text=False,
            force_patch_dropout=False, force_image_size=None, pretrained_image=False, image_mean=None, image_std=None,
            light_augmentation=True, aug_cfg={}, output_dict=True, with_score_predictor=False,
            with_region_predictor=False)
        state = _load(ckpt, reward)
        state = state.get("state_dict", state)
        _check_state(reward, ckpt, self.model.state_dict(), state, strict=True)
        self.model.load_state_dict(state)
        del state
        self.model.to(device).eval()
        self.tokenizer, self.device, self.scale = get_tokenizer(register_arch(arch)), device, scale
        self.floor = (lambda c: c.clamp(min=0)) if clamp else (lambda c: c)  # CLIPScore: 100 · max(cos, 0)
        self.info = {"package": f"hpsv2x {version('hpsv2x')}", "arch": arch, "checkpoint": str(ckpt),
                     "sha256": _short_sha256(ckpt)}

    @torch.inference_mode()  # no autograd record, no version counters: scoring only
    def score(self, prompts: list[str], pixels: np.ndarray) -> list[float]:
        images = torch.stack([self.preprocess(img) for img in _images(pixels)]).to(self.device)
        text = self.tokenizer(prompts).to(self.device)
        amp = torch.autocast("cuda") if self.device.startswith("cuda") else contextlib.nullcontext()
        with amp:  # as hpsv2.score: on CUDA the product runs in fp16 under autocast, so it is kept as it is
            out = self.model(images, text)
            cosine = torch.diagonal(out["image_features"] @ out["text_features"].T)
        return (self.scale * self.floor(cosine.float())).tolist()


def pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def load_all(config: dict) -> dict:
    """{reward name: model} from the server's config (what `adapters/reward_server.py` writes; the server also
    reads "chunk", images per forward, default 32):
        {"device": "auto", "imagereward": {"checkpoint", "med_config", "bert_tokenizer"},
         "hpsv2": {"v2.0": checkpoint, "v2.1": checkpoint, "arch": "ViT-H-14"}, "clip": {"checkpoint", "arch"}}
    hpsv2 versions are served as 'hpsv2_v2.0' and 'hpsv2_v2.1'. Any failure is one ConfigError line."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    device = pick_device(config.get("device", "auto"))
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r}: no CUDA device is visible to the reward server")
    hps, c_ir, c_clip = config.get("hpsv2") or {}, config.get("imagereward"), config.get("clip")
    builders = {}
    if c_ir:
        builders["imagereward"] = lambda: ImageRewardModel(c_ir.get("checkpoint"), c_ir.get("med_config"), device,
                                                           c_ir.get("bert_tokenizer"))
    for v in ("v2.0", "v2.1"):
        if hps.get(v):
            builders[f"hpsv2_{v}"] = lambda v=v: OpenClipModel(f"hpsv2_{v}", hps[v], hps.get("arch", "ViT-H-14"),
                                                               device, 1.0, clamp=False)
    if c_clip:
        builders["clip"] = lambda: OpenClipModel("clip", c_clip.get("checkpoint"), c_clip.get("arch", "ViT-H-14"),
                                                 device, 100.0, clamp=True)
    models = {}
    for name, build in builders.items():
        try:
            models[name] = build()
        except ConfigError:
            raise
        except Exception as exc:  # whatever the package raised while building or loading: one line, named
            raise ConfigError(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}") \
                from None
    return models
