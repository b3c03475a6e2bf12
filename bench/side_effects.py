"""Issue 14, item 5: what Co-GRPO costs besides what it optimises, read from the benchmark stage's images.

Colour diversity: on the held-out prompts that leave colour free (no object of the prompt names a colour), the
checker reads every sample's objects; per prompt, the entropy (bits) of the colours of its samples' objects, then
the mean over prompts, per variant and step count (the world has 6 colours: at most log2 6 = 2.58 bits). A reward
that never asks for a colour gives GRPO no reason to keep them varied; a collapse shows here. Accuracy away from the
trained step count is in the same table (GenEval-style overall, from the stage's table.csv).

    python bench/side_effects.py [--benchmark outputs/benchmark] [--out reports/side_effects]
Needs `dvc repro benchmark` (the default variants: base-base, trained-base, trained-learned).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cogrpo.rewards.checker import colour_free  # noqa: E402


def entropy_bits(counts: Counter) -> float:
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values()) if total else float("nan")


def colour_diversity(cell: Path, checker) -> dict:
    """Mean over colour-free prompts of the entropy of their samples' object colours, and how many prompts."""
    per_prompt = []
    for folder in sorted((cell / "images").iterdir()):
        spec = json.loads((folder / "metadata.jsonl").read_text().splitlines()[0])
        if not colour_free(spec):
            continue
        colours = Counter(o.color for png in sorted((folder / "samples").glob("*.png"))
                          for o in checker.detect(np.asarray(Image.open(png).convert("RGB"))).objects)
        if colours:
            per_prompt.append(entropy_bits(colours))
    return {"entropy_bits": float(np.mean(per_prompt)) if per_prompt else float("nan"), "prompts": len(per_prompt)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="outputs/benchmark")
    ap.add_argument("--out", default="reports/side_effects")
    args = ap.parse_args(argv)
    import polars as pl

    from cogrpo.validate import load_params
    from cogrpo.world.checker import Checker
    from cogrpo.world.scenes import World

    root, checker = Path(args.benchmark), Checker(World(load_params().world))
    table = pl.read_csv(root / "table.csv").filter((pl.col("suite") == "embedded")
                                                   & (pl.col("metric") == "geneval.overall"))
    rows = []
    for variant in sorted(p.name for p in root.iterdir() if p.is_dir()):
        for steps_dir in sorted((root / variant).iterdir()):
            steps = int(steps_dir.name.split("_")[1])
            accuracy = table.filter((pl.col("variant") == variant) & (pl.col("steps") == steps))["value"]
            rows.append({"variant": variant, "steps": steps, "accuracy": float(accuracy[0])}
                        | colour_diversity(steps_dir / "embedded", checker))
    Path(args.out + ".json").write_text(json.dumps(rows, indent=1) + "\n")
    steps = sorted({r["steps"] for r in rows})
    lines = ["# Side effects: colour diversity and accuracy by step count (`python bench/side_effects.py`)", "",
             f"Colour entropy (bits, mean over {rows[0]['prompts']} held-out prompts that name no colour; "
             f"max log2 6 = 2.58) / GenEval-style overall, from `{args.benchmark}`.", "",
             "| variant | " + " | ".join(f"{t} steps" for t in steps) + " |", "|---" * (len(steps) + 1) + "|"]
    for variant in dict.fromkeys(r["variant"] for r in rows):
        cells = {r["steps"]: r for r in rows if r["variant"] == variant}
        lines.append(f"| {variant} | " + " | ".join(f"{cells[t]['entropy_bits']:.2f} / {cells[t]['accuracy']:.3f}"
                                                     for t in steps) + " |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return {"rows": rows}


if __name__ == "__main__":
    main()
