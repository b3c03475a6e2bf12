"""Small file helpers: outputs appear whole or not at all, folders carry a manifest of their contents' hashes,
prompt sets as parquet."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from cogrpo.errors import InputError


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a scratch folder that replaces `path` only when the block succeeds."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if path.parent.is_dir():  # scratch left by processes that died half-way (kill -9) is removed here
        for stale in path.parent.glob(".*.tmp-*"):
            pid = stale.name.rpartition("-")[2]
            if pid.isdigit() and not process_alive(int(pid)):
                shutil.rmtree(stale, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


MANIFEST = "manifest.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(folder: str | Path) -> None:
    """Flush every file of the folder to disk, then write <folder>/manifest.json ({relative path: sha256}) last:
    a folder whose manifest verifies was written completely."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    for f in files:
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    manifest = {f.relative_to(folder).as_posix(): _sha256(f) for f in files}
    with open(folder / MANIFEST, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())


def verify_manifest(folder: str | Path, contents: bool = True) -> None:
    """Raise InputError naming the first file of the folder that is missing, changed or unreadable, or that the
    manifest does not list. contents=False checks only that the listed files, and no others, are there (cheap)."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        assert isinstance(manifest, dict)
    except (OSError, ValueError, AssertionError):
        raise InputError(f"{folder / MANIFEST}: missing or unreadable (the folder was not completely written)") from None
    for name, digest in manifest.items():
        f = folder / name
        if not f.is_file():
            raise InputError(f"{f}: missing")
        if contents and _sha256(f) != digest:
            raise InputError(f"{f}: contents differ from its manifest (corrupt or edited)")
    present = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    extra = [name.as_posix() for name in present if name.as_posix() not in manifest
             and not any(part.startswith(".") for part in name.parts)]  # hidden names are scratch and locks
    if extra:
        raise InputError(f"{folder / extra[0]}: not in the manifest (added after the folder was written)")


def content_hash(path: str | Path) -> str:
    """sha256 of a file's bytes, or of a folder's relative file names and bytes (sorted; hidden scratch skipped)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: input not found")
    if path.is_file():
        files = [(path, "")]
    else:  # hidden names are scratch (atomic_dir's temp folders, locks)
        files = [(p, p.relative_to(path).as_posix()) for p in sorted(path.rglob("*"))
                 if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)]
    h = hashlib.sha256()
    for f, name in files:
        h.update(name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def exclusive(folder: str | Path) -> Iterator[None]:
    """Hold <folder>/.lock for the block; a second live holder is refused with an error naming the folder.
    The OS drops the lock when its process dies, so a killed run never leaves the folder locked."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / ".lock"
    while True:
        fh = open(lock, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            fh.close()
            raise InputError(f"{folder}: in use by another run (pid {holder}); "
                             "give this run its own output folder") from None
        try:  # the holder before us may have removed the file we locked: then lock the new one
            if os.fstat(fh.fileno()).st_ino == os.stat(lock).st_ino:
                break
        except FileNotFoundError:
            pass
        fh.close()
    with fh:
        fh.truncate(0)
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:  # removed while still held: a process that opened the old file sees it gone and retries
            lock.unlink(missing_ok=True)


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """The file appears whole or not at all, and is on disk when this returns (its folder's entry: fsync_dir)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")  # unique across machines too
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def fsync_dir(folder: str | Path) -> None:
    """Make the names created or renamed in a folder durable (a crash then cannot lose them)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


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
