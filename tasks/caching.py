"""Cross-run caching of pipeline stages: Prefect cache keys from content, never from pickled values.

A stage's key hashes the params sections it reads, the bytes of its input files and folders, small JSON
arguments (a knob schedule), and the source of the modules it runs. The stage writes its outputs to
<root>/<stage>/<key>, so a key names its outputs as well as its Prefect result record: equal inputs find
both, and two experiments with different inputs never write to the same folder.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import Task
from prefect.cache_policies import CachePolicy
from prefect.locking.filesystem import FileSystemLockManager

from cogrpo.io import content_hash


@dataclass
class ContentKey(CachePolicy):
    stage: str = ""
    sections: tuple[str, ...] = ()  # params sections the stage reads
    files: tuple[str, ...] = ()  # task arguments naming input files or folders: hashed by content
    values: tuple[str, ...] = ()  # task arguments hashed by their JSON value
    modules: tuple[str, ...] = ()  # modules whose source the result depends on

    def key_for(self, inputs: dict[str, Any]) -> str:
        dumped = inputs["params"].model_dump(mode="json")
        h = hashlib.sha256(json.dumps({s: dumped[s] for s in self.sections}, sort_keys=True).encode())
        for name in self.files:
            h.update(content_hash(inputs[name]).encode())
        for name in self.values:
            h.update(json.dumps(inputs[name]).encode())
        for name in self.modules:
            h.update(inspect.getsource(importlib.import_module(name)).encode())
        return f"{self.stage}-{h.hexdigest()[:20]}"

    def compute_key(self, task_ctx, inputs, flow_parameters, **kwargs) -> str:
        return self.key_for(inputs)


def cached(task: Task, key: ContentKey, root: str | Path, outputs_exist: bool = True) -> Task:
    """`task` with its result persisted as JSON under <root>/cache, keyed by `key`. Serializable isolation:
    a second run reaching a key that is being computed waits for it and then reads it, rather than computing
    it again into the same folder. When the stage's output folder is gone, the record is refreshed."""
    root = Path(root).resolve()
    policy = key.configure(key_storage=str(root / "cache"), isolation_level="SERIALIZABLE",
                           lock_manager=FileSystemLockManager(root / "locks"))
    return task.with_options(cache_policy=policy, persist_result=True, result_serializer="json",
                             refresh_cache=not outputs_exist)
