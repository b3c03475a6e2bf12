"""What a stage's work receives besides its params, inputs and output folder."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path


def _silent(label: str, done: int, total: int, **metrics: float) -> None:
    pass


def _stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


@contextlib.contextmanager
def _no_reward_server(terms: Sequence) -> Iterator[tuple[str | None, dict]]:
    if terms:
        raise RuntimeError(f"no reward server outside a stage run for {list(terms)}: run the stage through its task "
                           "(flows/stage_runs.py), which gives its context one")
    yield None, {}


@dataclass
class StageContext:
    # report(label, done, total, **metrics): progress of long work (the orchestration shows it in the UIs)
    report: Callable[..., None] = _silent
    # a folder owned by this stage's identity that survives a crash (a training's checkpoints); None if unneeded
    state_dir: Path | None = None
    # the MLflow run the stage logs into, if any
    mlflow_run_id: str | None = None
    # reward_server(terms): a block with a reward server scoring the served ones among the reward terms
    # (cogrpo.rewards.Term), yielding (its URL, its health), or (None, {}) when none is served; the orchestration
    # starts one for the block (adapters/reward_server.py: serve)
    reward_server: Callable[[Sequence], contextlib.AbstractContextManager] = _no_reward_server
    # warn(message): one line the user must see (the orchestration puts it in the run's log)
    warn: Callable[[str], None] = _stderr
