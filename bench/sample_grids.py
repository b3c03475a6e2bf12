"""Sample grids for the eye, from the pipeline's evaluation folders (GenEval layout).

reports/grid_baseline.png and reports/grid_co.png are the stages' own grids (two held-out prompts per tag);
reports/grid_base_vs_co.png puts, for the first held-out prompt of every tag, the base model's samples
(left) beside the trained model's (right). Both evaluations use the same prompts and sampling seed.
Usage (after `dvc repro`): python bench/sample_grids.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from PIL import Image

from cogrpo.images import captioned_grid


def first_prompt_per_tag(folder: Path) -> dict[str, tuple[str, list[np.ndarray], list[bool]]]:
    """Per tag: the first prompt, its samples and the checker's verdict on each."""
    rows = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    chosen: dict[str, str] = {}
    for r in rows:
        chosen.setdefault(r["tag"], r["filename"].split("/")[0])
    out = {}
    for tag, prefix in chosen.items():
        mine = [r for r in rows if r["filename"].split("/")[0] == prefix]
        out[tag] = (mine[0]["prompt"], [np.asarray(Image.open(folder / r["filename"]).convert("RGB")) for r in mine],
                    [r["correct"] for r in mine])
    return out


def main() -> None:
    base, trained = first_prompt_per_tag(Path("outputs/baseline")), first_prompt_per_tag(Path("outputs/eval"))
    tags = list(base)
    images = np.stack([np.stack(base[t][1] + trained[t][1]) for t in tags])
    grid = captioned_grid(images, [f"[{t}] {base[t][0]}" for t in tags], [base[t][2] + trained[t][2] for t in tags],
                          "left half: base model, base schedule; right half: trained, learned schedule "
                          "(green: passes, red: fails)")
    Image.fromarray(grid).save("reports/grid_base_vs_co.png")
    shutil.copy("outputs/baseline/grid.png", "reports/grid_baseline.png")
    shutil.copy("outputs/eval/grid.png", "reports/grid_co.png")
    print("rows (tags):", ", ".join(tags))


if __name__ == "__main__":
    main()
