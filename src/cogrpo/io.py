"""Small file helpers: outputs appear whole or not at all; prompt sets as parquet."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from cogrpo.errors import InputError


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a scratch folder that replaces `path` only when the block succeeds."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def write_text_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def write_json(path: str | Path, obj: object) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1) + "\n")


def write_specs(path: str | Path, specs: list[dict]) -> None:
    """One row per prompt: prompt, tag, metadata (the GenEval spec as JSON)."""
    pl.DataFrame({"prompt": [s["prompt"] for s in specs], "tag": [s["tag"] for s in specs],
                  "metadata": [json.dumps(s) for s in specs]}).write_parquet(path)


def read_specs(path: str | Path) -> list[dict]:
    """The specs of a prompt file; a missing, malformed or empty file is one clear error naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: prompt file not found")
    try:
        df = pl.read_parquet(path)
    except Exception as err:  # polars raises several types for a corrupt file
        raise InputError(f"{path}: not a readable parquet file ({type(err).__name__})") from None
    if "metadata" not in df.columns:
        raise InputError(f"{path}: no 'metadata' column (expected prompt, tag, metadata)")
    if df.height == 0:
        raise InputError(f"{path}: the prompt file is empty")
    specs = []
    for i, raw in enumerate(df["metadata"].to_list()):
        try:
            spec = json.loads(raw)
            assert isinstance(spec.get("prompt"), str) and isinstance(spec.get("include"), list)
        except (TypeError, ValueError, AssertionError, AttributeError):
            raise InputError(f"{path}: row {i}: metadata is not a GenEval spec with prompt and include") from None
        specs.append(spec)
    return specs
