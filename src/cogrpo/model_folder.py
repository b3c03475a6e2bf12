"""A model folder (the pretrain stage's `models/base`, the train stage's `models/trained`): the one place that knows
the files a training writes beside the generator's own (which `Generator.save_trained` writes and
`backbones/loading.py` reads), and which of them decodes at a given step count.

    schedule.json                  the learned per-step schedule, at schedule.steps
    schedule_T<n>.json             the schedule learned at each other step count n of train.extra_steps
    schedule_policy.safetensors    a prompt-conditioned policy, whole (train.schedule_policy: prompt)
    state_policy.safetensors       a state-conditioned policy, whole (train.schedule_policy: state)
    train.json                     the training's record: mode, iterations, reward_last_10pct; with train.validation
                                   the selected iteration, every validation and its regressions

A base model holds none of them: it decodes under the base schedule.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelFolder:
    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @property
    def schedule(self) -> Path:
        """The learned per-step schedule at the trained step count (schedule.steps)."""
        return self.path / "schedule.json"

    def schedule_at(self, steps: int) -> Path:
        """The schedule learned at another step count (train.extra_steps)."""
        return self.path / f"schedule_T{steps}.json"

    @property
    def prompt_policy(self) -> Path:
        """A prompt-conditioned schedule policy's per-prompt part (its per-step part is `schedule`)."""
        return self.path / "schedule_policy.safetensors"

    @property
    def state_policy(self) -> Path:
        """A state-conditioned schedule policy (its per-step part is `schedule`), which decodes step by step."""
        return self.path / "state_policy.safetensors"

    @property
    def record(self) -> Path:
        """The training's record (train.json)."""
        return self.path / "train.json"

    @property
    def learned(self) -> bool:
        """Whether it holds a learned schedule (a trained model; a base model decodes under the base schedule)."""
        return self.schedule.is_file()

    def schedules(self) -> list[Path]:
        """Every learned schedule file it holds: schedule.json, then schedule_T<n>.json by name."""
        return [p for p in [self.schedule, *sorted(self.path.glob("schedule_T*.json"))] if p.is_file()]

    def conditioned_policy(self) -> Path | None:
        """The prompt- or state-conditioned policy file it holds, if any (a training exports at most one)."""
        return next((p for p in (self.prompt_policy, self.state_policy) if p.is_file()), None)

    def schedule_for(self, steps: int) -> tuple[Path | None, Path | None]:
        """What decodes at `steps` steps, as (per-step schedule file, conditioned policy file): with a prompt- or
        state-conditioned policy, (None, the policy) — its schedules are carried to the base schedule at `steps`;
        else the schedule trained at `steps` (schedule_T<steps>.json), else schedule.json (carried to `steps`), or
        without one None (the base schedule); and no policy."""
        policy = self.conditioned_policy()
        if policy:
            return None, policy
        if self.schedule_at(steps).is_file():
            return self.schedule_at(steps), None
        return (self.schedule if self.schedule.is_file() else None), None

    def write_record(self, record: dict) -> None:
        self.record.write_text(json.dumps(record))

    def read_record(self) -> dict:
        return json.loads(self.record.read_text())
