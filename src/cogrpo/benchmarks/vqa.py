"""VQA plug-ins for DPG-Bench scoring (`cogrpo.benchmarks.dpg.VQA`), loaded from local folders only.

`ModelscopeMPLUG` is DPG's own judge (mPLUG-large VQA through modelscope); its raw answers are returned as DPG
reads them. `TransformersVQA` is a stand-in judge (e.g. BLIP VQA): its numbers are not DPG's published ones.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from cogrpo.errors import InputError


def _folder(path: str | Path, what: str) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise InputError(f"{p}: {what} folder not found (models load offline, from a local folder)")
    return p


class TransformersVQA:
    """A transformers VQA model from a local folder (AutoProcessor + AutoModelForVisualQuestionAnswering).

    Generative models (BLIP VQA) answer with their decoded text, lower-cased and stripped; classifier models
    (ViLT) with the label of their top logit, lower-cased and stripped. device "auto": cuda when available.
    """

    def __init__(self, model_path: str | Path, device: str = "auto", dtype: str = "float32",
                 batch_size: int = 32, max_new_tokens: int = 10):
        import torch
        from transformers import AutoModelForVisualQuestionAnswering, AutoProcessor

        path = _folder(model_path, "VQA model")
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        self.dtype = getattr(torch, dtype, None)
        if not isinstance(self.dtype, torch.dtype):
            raise InputError(f"unknown torch dtype {dtype!r} for the VQA model {path}")
        self.processor = AutoProcessor.from_pretrained(path)
        self.model = AutoModelForVisualQuestionAnswering.from_pretrained(path, dtype=self.dtype)
        self.model.to(self.device).eval()
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens

    def answer(self, images: list[Image.Image], questions: list[str]) -> list[str]:
        import torch

        if len(images) != len(questions):
            raise ValueError(f"{len(images)} images for {len(questions)} questions")
        out: list[str] = []
        for i in range(0, len(images), self.batch_size):
            ims = [im.convert("RGB") for im in images[i : i + self.batch_size]]
            inputs = self.processor(images=ims, text=questions[i : i + self.batch_size], return_tensors="pt",
                                    padding=True).to(self.device)
            inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
            with torch.inference_mode():
                if self.model.can_generate():
                    ids = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens)
                    texts = self.processor.batch_decode(ids, skip_special_tokens=True)
                else:
                    top = self.model(**inputs).logits.argmax(-1).tolist()
                    texts = [self.model.config.id2label[j] for j in top]
            out += [t.strip().lower() for t in texts]
        return out


class ModelscopeMPLUG:
    """DPG's judge: modelscope's visual-question-answering pipeline on a local mPLUG folder (DPG's script loads
    `damo/mplug_visual-question-answering_coco_large_en`). One question at a time, answers unchanged, as DPG."""

    def __init__(self, model_path: str | Path, device: str = "gpu"):
        try:
            from modelscope.pipelines import pipeline
            from modelscope.utils.constant import Tasks
        except ImportError:
            raise InputError(f"modelscope is not installed: it is needed for DPG's mPLUG VQA ({model_path})") from None
        path = _folder(model_path, "mPLUG model")
        self.pipe = pipeline(Tasks.visual_question_answering, model=str(path), device=device)

    def answer(self, images: list[Image.Image], questions: list[str]) -> list[str]:
        if len(images) != len(questions):
            raise ValueError(f"{len(images)} images for {len(questions)} questions")
        return [self.pipe({"image": im, "question": q})["text"] for im, q in zip(images, questions)]


KINDS = {"transformers": TransformersVQA, "blip": TransformersVQA, "mplug": ModelscopeMPLUG}


def load_vqa(kind: str, path: str | Path, **kwargs):
    """A VQA plug-in by kind: "mplug" (DPG's judge, needs modelscope), "transformers" or "blip"."""
    if kind not in KINDS:
        raise InputError(f"unknown VQA kind {kind!r}: use one of {', '.join(KINDS)}")
    return KINDS[kind](path, **kwargs)
