"""Generation in cells: how the evaluation stages and the benchmark make their images, resumable and shardable.

A cell (one model, schedule and prompt set) is a folder: `images/` in GenEval's layout (`<i:05d>/metadata.jsonl`,
`<i:05d>/samples/<j:04d>.png`), then `done/<b:05d>` for each batch of `eval.batch_prompts` prompts whose images
are on disk (fsynced before the marker, which holds each file's sha256: a damaged image is found and its batch
generated again, `undo_damaged`). Batches are fixed by the prompt list alone, and each trajectory's noise by
its index in the whole set, so any shard of the batches (batch b belongs to shard b mod n), any crash and rerun,
or any order gives the same images: a batch marked done is never generated again, one cut off mid-way is
generated whole. A worker claims a batch with `done/<b:05d>.lock` (created exclusively, holding its pid), so
shard workers (pipelines/generate.py, or the `generate` Prefect flow) and the stage itself can run at once; the
lock of a dead worker is taken over.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from cogrpo.backbones.loading import load_generator
from cogrpo.benchmarks.geneval import sample_policy_batch
from cogrpo.config import Params
from cogrpo.core.generator import Generator
from cogrpo.core.policy import SchedulePolicy, load_conditioned_policy
from cogrpo.core.schedule import resolve_schedule
from cogrpo.errors import InputError
from cogrpo.io import fsync_dir, process_alive, write_bytes_atomic
from cogrpo.model_folder import ModelFolder


@dataclass(frozen=True)
class Suite:
    """A prompt set, validated: `metadata[i]` is what its scorer needs of prompt i (a GenEval spec, a DPG item id,
    an HPS style, an ImageReward id)."""

    name: str
    prompts: list[str]
    metadata: list[dict]
    samples: int


@dataclass(frozen=True)
class Cell:
    """One cell to generate: its folder, prompts, (T, 4) schedule, and the stage input holding its model, or with
    `snapshot` a snapshot folder (benchmark.models) that `model` names. With a conditioned policy (a trained
    model's ModelFolder.prompt_policy or state_policy), each prompt's schedule is the policy's for that prompt (a
    state policy's: chosen step by step), carried to the step count of `knobs` (then the base schedule at that
    count)."""

    folder: Path
    suite: Suite
    knobs: torch.Tensor
    model: str
    policy: Path | None = None
    snapshot: str | None = None


def cell_generator(params: Params, inputs: dict[str, Path], cell: Cell) -> Generator:
    """The generator of a cell's model: the stage input it names, or its snapshot folder loaded as model.pretrained
    with no adapters (lora_rank 0 here only skips adding untrained adapters: it decodes, never trains)."""
    if cell.snapshot is None:
        return load_generator(params.model, {"model": inputs[cell.model], "tokenizer": inputs["tokenizer"]},
                              params.world)
    cfg = params.model.model_copy(update={"pretrained": cell.snapshot, "lora_rank": 0})
    return load_generator(cfg, {"tokenizer": inputs["tokenizer"]})


def model_schedule(params: Params, model: Path, steps: int | None = None) -> tuple[torch.Tensor, Path | None]:
    """How a model folder decodes at `steps` (default schedule.steps), as its (T, 4) schedule and its conditioned
    policy file: the files ModelFolder.schedule_for names, resolved against the base schedule at `steps`."""
    schedule, policy = ModelFolder(model).schedule_for(steps or params.schedule.steps)
    return resolve_schedule(params.schedule, schedule, steps), policy


def batches(suite: Suite, batch_prompts: int) -> int:
    return math.ceil(len(suite.prompts) / batch_prompts)


def _png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


STALE_CLAIM_S = 60.0  # a lock file still empty after this long was left by a worker killed while creating it
REMOTE_CLAIM_S = 3600.0  # another machine's claim is trusted this long (its pid means nothing here)
HOST = socket.gethostname()


def _held(lock: Path) -> bool:
    """Whether the batch's lock belongs to a worker that may still be at it: a live process of this machine, a
    claim of another machine younger than REMOTE_CLAIM_S, or a lock still being written. A vanished lock is not."""
    try:
        holder, age = lock.read_text().split(), time.time() - lock.stat().st_mtime
    except OSError:
        return False
    if len(holder) != 2 or not holder[1].isdigit():
        return age < STALE_CLAIM_S
    host, pid = holder[0], int(holder[1])
    return process_alive(pid) if host == HOST else age < REMOTE_CLAIM_S


def _claim(lock: Path) -> bool:
    """Create the batch's lock file (this machine and pid); False while another worker holds it (a dead one's lock
    is taken over). Two workers taking over the same dead lock at once can both generate the batch: harmless, as
    the batch's bytes are fixed and every file is written whole under a name of its own, then renamed."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if _held(lock):
                return False
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{HOST} {os.getpid()}")
        return True
    return False


def _pending(suite: Suite, batch_prompts: int, cell: Path, shard: int, shards: int) -> bool:
    """Whether shard `shard` of the cell has a batch neither done nor held by a worker (one to generate now)."""
    done = cell / "done"
    return any(not (done / f"{b:05d}").exists() and not _held(done / f"{b:05d}.lock")
               for b in range(shard, batches(suite, batch_prompts), shards))


def generate_cell(gen: Generator, suite: Suite, knobs: torch.Tensor, seed: int, batch_prompts: int, cell: Path,
                  shard: int = 0, shards: int = 1, on_batch: Callable[[int], None] | None = None,
                  policy: SchedulePolicy | None = None) -> int:
    """Generate the batches of shard `shard` of `shards` that are neither done nor claimed by a live worker;
    returns how many it generated. With a policy, knobs is the base schedule its per-prompt schedules go to."""
    ran, done = 0, cell / "done"
    done.mkdir(parents=True, exist_ok=True)
    for b in range(shard, batches(suite, batch_prompts), shards):
        marker, lock = done / f"{b:05d}", done / f"{b:05d}.lock"
        if marker.exists() or not _claim(lock):
            continue
        try:
            if marker.exists():  # finished by a worker between our check and our claim
                continue
            start = b * batch_prompts
            chunk = suite.prompts[start:start + batch_prompts]
            with torch.no_grad():
                traj = sample_policy_batch(gen, chunk, start, knobs, suite.samples, seed, policy)
            folders, written = set(), {}
            for k, (p, img) in enumerate(zip(traj.prompt_index.tolist(), gen.decode(traj.tokens))):
                folder = cell / "images" / f"{p:05d}"
                files = {folder / "samples" / f"{k % suite.samples:04d}.png": _png(img)}
                if k % suite.samples == 0:
                    files[folder / "metadata.jsonl"] = (json.dumps(suite.metadata[p]) + "\n").encode()
                for path, data in files.items():
                    write_bytes_atomic(path, data)
                    written[path.relative_to(cell).as_posix()] = hashlib.sha256(data).hexdigest()
                folders |= {folder, folder / "samples"}
            for folder in folders | {cell / "images"}:
                fsync_dir(folder)
            write_bytes_atomic(marker, json.dumps(written, sort_keys=True).encode())  # what the batch wrote
            fsync_dir(done)
        finally:
            lock.unlink(missing_ok=True)
        ran += 1
        if on_batch:
            on_batch(b)
    return ran


def undo_damaged(cell: Path, warn: Callable[[str], None]) -> list[int]:
    """Unmark the done batches of the cell whose files no longer match the sha256s their marker recorded (so
    they are generated again: damaged images never reach a score), with one warning line each; returns them.
    A marker from before the hashes (empty) is taken as it is."""
    undone = []
    for marker in sorted((cell / "done").glob("[0-9]" * 5)):
        recorded = json.loads(marker.read_bytes() or b"{}")
        for name, digest in recorded.items():
            path = cell / name
            if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                warn(f"{path}: {'missing' if not path.is_file() else 'changed since it was generated'}; "
                     f"batch {marker.name} of {cell} is generated again")
                marker.unlink()
                undone.append(int(marker.name))
                break
    return undone


def cell_done(suite: Suite, batch_prompts: int, cell: Path) -> bool:
    return all((cell / "done" / f"{b:05d}").exists() for b in range(batches(suite, batch_prompts)))


def read_images(suite: Suite, cell: Path, batch_prompts: int) -> tuple[np.ndarray, torch.Tensor]:
    """All of a cell's images, prompt-major, and the prompt index of each."""
    images = []
    for p in range(len(suite.prompts)):
        for j in range(suite.samples):
            png = cell / "images" / f"{p:05d}" / "samples" / f"{j:04d}.png"
            try:
                images.append(np.asarray(Image.open(png).convert("RGB")))
            except (OSError, ValueError) as err:
                marker = cell / "done" / f"{p // batch_prompts:05d}"
                raise InputError(f"{png}: unreadable ({type(err).__name__}); delete {marker} and rerun to generate "
                                 "its batch again") from None
    return np.stack(images), torch.arange(len(suite.prompts)).repeat_interleave(suite.samples)


def link_images(cell: Path, dest: Path) -> None:
    """dest (created, or merged into) holding the cell's images as hard links (plain copies across file systems)."""
    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(cell / "images", dest, copy_function=link, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".*"))  # a crashed writer's temporary files stay behind


def generate_cells(params: Params, inputs: dict[str, Path], cells: list[Cell], shard: int = 0, shards: int = 1,
                   report: Callable[..., None] | None = None, root: Path | None = None,
                   loaded: dict | None = None, warn: Callable[[str], None] | None = None) -> dict[str, int]:
    """Every cell's batches of one shard; returns batches generated per cell (0 where none was free), named by the
    cell's folder (relative to root). A model is loaded only when a cell of it has a batch to generate, and kept
    in `loaded` (model input → generator) for the next call. `warn`: given, the done batches are checked first
    (undo_damaged)."""
    ran: dict[str, int] = {}
    loaded = {} if loaded is None else loaded
    batch_prompts = params.eval.batch_prompts
    for cell in cells:
        name = str(cell.folder.relative_to(root) if root else cell.folder)
        if warn is not None and (cell.folder / "done").is_dir():
            undo_damaged(cell.folder, warn)
        if not _pending(cell.suite, batch_prompts, cell.folder, shard, shards):
            ran[name] = 0
            continue
        if cell.model not in loaded:
            loaded.clear()  # one model in memory at a time (cells come model by model)
            torch.set_num_threads(params.threads)
            loaded[cell.model] = cell_generator(params, inputs, cell)
        total = batches(cell.suite, batch_prompts)
        with loaded[cell.model].sampling():  # e.g. LoRA adapters folded into the weights while decoding
            ran[name] = generate_cell(loaded[cell.model], cell.suite, cell.knobs, params.eval.seed, batch_prompts,
                                      cell.folder, shard, shards, on_batch=lambda b, label=name, total=total:
                                      report and report(label, b + 1, total),
                                      policy=cell.policy and load_conditioned_policy(cell.policy))
    return ran


WAIT_SAY_S = 60.0  # how often a wait on other workers' batches says what it waits for


def _holders(cells: list[Cell]) -> list[str]:
    """The unfinished batches of `cells` that other workers hold, each as its lock file, holder and age."""
    held = []
    for cell in cells:
        for lock in sorted((cell.folder / "done").glob("*.lock")):
            if (lock.with_suffix("")).exists() or not _held(lock):
                continue
            try:
                holder, age = lock.read_text().split(), time.time() - lock.stat().st_mtime
            except OSError:
                continue
            who = f"pid {holder[1]} on {holder[0]}" if len(holder) == 2 else "a worker starting"
            held.append(f"{lock} ({who}, claimed {age:.0f} s ago)")
    return held


def wait_for_cells(params: Params, inputs: dict[str, Path], cells: list[Cell], poll_s: float = 2.0,
                   report: Callable[..., None] | None = None, root: Path | None = None,
                   warn: Callable[[str], None] | None = None) -> None:
    """Generate whatever is left (also batches whose worker died) until every cell is done: batches held by
    other workers are theirs to finish. With `warn`: done batches are checked against their recorded hashes once,
    first, and a wait on other workers says every WAIT_SAY_S what it waits for (a stopped worker holds its
    batches until it ends)."""
    loaded: dict = {}
    check, started, said = warn, time.monotonic(), 0.0
    while True:
        generate_cells(params, inputs, cells, report=report, root=root, loaded=loaded, warn=check)
        check = None
        if all(cell_done(c.suite, params.eval.batch_prompts, c.folder) for c in cells):
            return
        waited = time.monotonic() - started
        if warn is not None and waited - said >= WAIT_SAY_S and (held := _holders(cells)):
            said = waited
            warn(f"waited {waited:.0f} s for {len(held)} batch{'es' * (len(held) > 1)} other workers hold: {'; '.join(held[:3])}"
                 f"{'; …' if len(held) > 3 else ''} (a stopped or hung worker holds them until it ends: end it, "
                 "and this stage takes them over)")
        time.sleep(poll_s)
