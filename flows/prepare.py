"""Flows of the data stages."""

from __future__ import annotations

from prefect import flow

from cogrpo.config import Params
from tasks.data import train_tokenizer, write_prompt_sets


@flow(name="prepare-prompts")
def prepare_prompts(params: Params, out_dir: str = "data/prompts") -> dict:
    """Write the train and eval prompt sets; return the split report."""
    return write_prompt_sets(params, out_dir)


@flow(name="train-tokenizer")
def tokenizer(params: Params, prompts_dir: str = "data/prompts", out_dir: str = "models/tokenizer") -> dict:
    """Learn the VQ tokenizer; return its round-trip pass rates."""
    return train_tokenizer(params, prompts_dir, out_dir)
