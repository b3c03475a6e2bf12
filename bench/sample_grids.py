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

from cogrpo.images import image_grid


def first_prompt_per_tag(folder: Path) -> dict[str, list[np.ndarray]]:
    rows = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    chosen: dict[str, str] = {}
    for r in rows:
        chosen.setdefault(r["tag"], r["filename"].split("/")[0])
    return {tag: [np.asarray(Image.open(folder / r["filename"]).convert("RGB")) for r in rows
                  if r["filename"].split("/")[0] == prefix] for tag, prefix in chosen.items()}


def main() -> None:
    base, trained = first_prompt_per_tag(Path("outputs/baseline")), first_prompt_per_tag(Path("outputs/eval"))
    images = [img for tag in base for img in base[tag] + trained[tag]]
    cols = 2 * len(next(iter(base.values())))
    grid = image_grid(np.stack(images), cols=cols)
    Image.fromarray(np.kron(grid, np.ones((3, 3, 1), np.uint8))).save("reports/grid_base_vs_co.png")
    shutil.copy("outputs/baseline/grid.png", "reports/grid_baseline.png")
    shutil.copy("outputs/eval/grid.png", "reports/grid_co.png")
    print("rows (tags):", ", ".join(base))


if __name__ == "__main__":
    main()
