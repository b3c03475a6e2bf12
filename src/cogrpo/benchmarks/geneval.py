"""GenEval-style and DPG-style evaluation of a model under a schedule, on a list of specs.

Rows follow GenEval's results layout (one per image: filename, tag, prompt, correct, reason, metadata),
so GenEval's own summary script reads them. `correct` is the strict verdict (every fact, and a clean
image); `geneval_correct` drops the cleanliness fact, as GenEval itself would. The summary's overall
is GenEval's: the mean over tags of per-tag image accuracy. The DPG-style score is the mean fraction of
facts satisfied on "dpg" prompts.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import torch

from cogrpo.core.generator import Generator
from cogrpo.core.policy import SchedulePolicy, decoding_schedule
from cogrpo.core.sampler import KnobChoice, Trajectory, sample
from cogrpo.world.checker import Checker
from cogrpo.world.prompts import GENEVAL_TAGS


def trajectory_seeds(seed: int, n: int, offset: int = 0) -> torch.Tensor:
    return torch.arange(offset, offset + n, dtype=torch.long) + seed * 1_000_003


def generate(gen: Generator, prompts: list[str], knobs: torch.Tensor, samples: int, seed: int,
             batch_prompts: int = 64, on_batch: Callable[[int, int], None] | None = None) -> Trajectory:
    """`samples` trajectories per prompt, prompt-major; knobs (T, 4) or one (n, T, 4) row per trajectory.
    on_batch(prompts done, prompts in all) after each batch."""
    parts = []
    for start in range(0, len(prompts), batch_prompts):
        chunk = prompts[start : start + batch_prompts]
        k = knobs[start * samples : (start + len(chunk)) * samples] if knobs.dim() == 3 else knobs
        parts.append(sample_batch(gen, chunk, start, k, samples, seed))
        if on_batch:
            on_batch(start + len(chunk), len(prompts))
    return Trajectory.cat(parts)


def sample_batch(gen: Generator, chunk: list[str], start: int, knobs: torch.Tensor, samples: int,
                 seed: int, choose: KnobChoice | None = None) -> Trajectory:
    """`samples` trajectories of each prompt of a batch whose first prompt is prompt `start` of the set, under knobs
    (T, 4) or one (T, 4) per trajectory of the batch (or chosen step by step: `sample`'s choose): each trajectory's
    noise is seeded by its index in the whole set, so a batch does not depend on the others."""
    rows = torch.arange(start, start + len(chunk)).repeat_interleave(samples)
    return sample(gen, gen.encode(chunk).repeat_interleave(samples), knobs,
                  trajectory_seeds(seed, len(rows), start * samples), rows, choose=choose)


def sample_policy_batch(gen: Generator, chunk: list[str], start: int, base: torch.Tensor, samples: int, seed: int,
                        policy: SchedulePolicy | None = None) -> Trajectory:
    """sample_batch at π_φ's mean: each prompt under the policy's schedule for it (a state policy's chosen step by
    step), carried to the step count of base (T, 4); without a policy, under base itself."""
    if policy is None:
        return sample_batch(gen, chunk, start, base, samples, seed)
    context = gen.prompt_features(gen.encode(chunk)).repeat_interleave(samples, 0)
    knobs, choose = decoding_schedule(policy, context, base)
    return sample_batch(gen, chunk, start, knobs, samples, seed, choose)


def score(checker: Checker, images: np.ndarray, specs: list[dict], prompt_index: torch.Tensor) -> list[dict]:
    """One GenEval results row per image."""
    rows = []
    seen: dict[int, int] = {}
    for img, p in zip(images, prompt_index.tolist()):
        spec = specs[p]
        j = seen[p] = seen.get(p, -1) + 1
        v = checker.check(img, spec)
        rows.append({"filename": f"{p:05d}/samples/{j:04d}.png", "tag": spec["tag"], "prompt": spec["prompt"],
                     "correct": v.correct, "geneval_correct": v.geneval_correct, "score": v.score,
                     "reason": v.reason, "metadata": json.dumps(spec)})
    return rows


def summarize(rows: list[dict]) -> dict:
    """{"geneval": {"overall": x, <tag>: x, ...}, "dpg": {"score": x}} from results rows."""
    per_tag = {t: float(np.mean([r["correct"] for r in rows if r["tag"] == t]))
               for t in GENEVAL_TAGS if any(r["tag"] == t for r in rows)}
    dpg = [r["score"] for r in rows if r["tag"] == "dpg"]
    out = {"geneval": {"overall": float(np.mean(list(per_tag.values()))) if per_tag else float("nan"), **per_tag}}
    out["dpg"] = {"score": float(np.mean(dpg)) if dpg else float("nan")}
    return out


def evaluate(gen: Generator, checker: Checker, specs: list[dict], knobs: torch.Tensor, samples: int, seed: int,
             batch_prompts: int = 64, on_batch: Callable[[int, int], None] | None = None) -> tuple[list[dict], np.ndarray]:
    """Generate, decode and check: results rows and the decoded images, prompt-major."""
    traj = generate(gen, [s["prompt"] for s in specs], knobs, samples, seed, batch_prompts, on_batch)
    images = gen.decode(traj.tokens)
    return score(checker, images, specs, traj.prompt_index), images
