"""Numbered checkpoints that a crash cannot strand and a corrupt file cannot poison.

<root>/<iteration:06d>/ is written in a scratch folder, its files flushed, its manifest of content hashes
written last, then renamed into place; the newest `keep` are kept. Loading tries them newest first, verifies
each against its manifest and skips (and reports) a bad one, so a torn or edited checkpoint costs one
checkpoint interval, never the run.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from cogrpo.errors import InputError
from cogrpo.io import atomic_dir, verify_manifest, write_manifest


def save(root: str | Path, iteration: int, fill: Callable[[Path], None], keep: int = 2,
         protect: Iterable[int] = ()) -> Path:
    """fill(folder) writes the checkpoint's files; returns <root>/<iteration>. Older checkpoints beyond the newest
    `keep` at or before `iteration` are removed, except the protected iterations (the one validation chose); later
    ones (from a longer run with the same identity) stay."""
    root = Path(root)
    target = root / f"{iteration:06d}"
    with atomic_dir(target) as tmp:
        fill(tmp)
        write_manifest(tmp)
    protected = set(protect)
    for old in [c for c in numbered(root) if int(c.name) <= iteration][keep:]:
        if int(old.name) not in protected:
            shutil.rmtree(old, ignore_errors=True)
    return target


def numbered(root: str | Path) -> list[Path]:
    """Checkpoint folders, newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: -int(p.name))


def latest_good(root: str | Path, max_iteration: int, warn: Callable[[str], None]) -> Path | None:
    """The newest checkpoint at or before max_iteration whose files match its manifest; bad ones are reported
    through warn(line) and skipped. None when there is none (start from the beginning)."""
    for folder in numbered(root):
        if int(folder.name) > max_iteration:
            continue
        try:
            verify_manifest(folder)
        except InputError as err:
            warn(f"skipping checkpoint {folder}: {err}")
            continue
        return folder
    return None


def require_finite(tensors: Iterable[tuple[str, torch.Tensor]], where: str) -> None:
    """Refuse weights with NaN or infinite values: such a model must never be exported, evaluated or resumed."""
    for name, t in tensors:
        if t.is_floating_point() and not torch.isfinite(t).all():
            bad = int((~torch.isfinite(t)).sum())
            raise InputError(f"{where}: tensor '{name}' has {bad} non-finite values; the model is unusable")
