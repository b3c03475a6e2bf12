"""Each benchmark's summary, computed as its own scripts compute it (pure functions over per-image scores).

GenEval: `geneval_summary` reads the rows of a results.jsonl (the evaluator's or ours) as GenEval's
summary_scores.py does: per tag, the fraction of its images judged correct; overall, the mean over the tags
present in the file; also the fractions of correct images and of prompts with at least one correct image.
ImageReward: the mean over prompts of each prompt's mean score (its benchmark scores 10 images per prompt).
HPSv2: 100 × cosine per image; per style, the mean of the means over consecutive chunks of 80 scores (hpsv2's
evaluation.py; with 800 prompts per style it equals the style's mean), and "average", the mean over every image.
DPG-Bench is in cogrpo.benchmarks.dpg.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

HPS_CHUNK = 80


def geneval_summary(rows: Sequence[dict]) -> dict[str, float]:
    """{"overall", <tag>…, "images_correct", "prompts_correct"} of GenEval results rows (tags in file order)."""
    by_tag: dict[str, list[bool]] = defaultdict(list)
    by_prompt: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        by_tag[r["tag"]].append(bool(r["correct"]))
        by_prompt[r["metadata"]].append(bool(r["correct"]))
    per_tag = {tag: float(np.mean(v)) for tag, v in by_tag.items()}
    return {"overall": float(np.mean(list(per_tag.values()))), **per_tag,
            "images_correct": float(np.mean([bool(r["correct"]) for r in rows])),
            "prompts_correct": float(np.mean([any(v) for v in by_prompt.values()]))}


def imagereward_summary(scores: Sequence[float], prompt_index: Sequence[int]) -> dict[str, float]:
    """{"mean"}: the mean over prompts of the mean of each prompt's images."""
    per_prompt: dict[int, list[float]] = defaultdict(list)
    for s, p in zip(scores, prompt_index, strict=True):
        per_prompt[p].append(float(s))
    return {"mean": float(np.mean([np.mean(v) for v in per_prompt.values()]))}


def hps_summary(cosines: Sequence[float], styles: Sequence[str]) -> dict[str, float]:
    """{<style>…, "average"} from one cosine per image (in prompt order within each style), reported ×100."""
    per_style: dict[str, list[float]] = defaultdict(list)
    for c, style in zip(cosines, styles, strict=True):
        per_style[style].append(100.0 * float(c))
    out = {style: float(np.mean([np.mean(v[i:i + HPS_CHUNK]) for i in range(0, len(v), HPS_CHUNK)]))
           for style, v in per_style.items()}
    out["average"] = float(np.mean([s for v in per_style.values() for s in v]))
    return out
