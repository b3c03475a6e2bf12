"""The headline stage's work: the few numbers a reader looks for first, in one small metrics file."""

from __future__ import annotations

import json
from pathlib import Path

from cogrpo.config import Params
from cogrpo.model_folder import ModelFolder
from tasks.context import StageContext


def headline(params: Params, inputs: dict[str, Path], out: Path, ctx: StageContext) -> dict:
    """The numbers a reader looks for first, base model against trained, from the evaluations' summaries and the
    training's record: GenEval-style overall on held-out and seen prompts, DPG-style held-out, train reward."""
    base, trained = (json.loads((inputs[k] / "summary.json").read_text()) for k in ("baseline", "evaluate"))
    train = ModelFolder(inputs["trained"]).read_record()
    return {"heldout": {"base": base["heldout"]["geneval"]["overall"], "trained": trained["heldout"]["geneval"]["overall"]},
            "seen": {"base": base["seen"]["geneval"]["overall"], "trained": trained["seen"]["geneval"]["overall"]},
            "dpg": {"base": base["heldout"]["dpg"]["score"], "trained": trained["heldout"]["dpg"]["score"]},
            "train": {"mode": train["mode"], "reward": train["reward_last_10pct"]}}
