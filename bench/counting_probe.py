"""Which counting prompts a model gets right, and how many objects it draws instead (issue 24: the counting tag).

Every count 1–4 of every shape of the world, seen or held out, `--samples` images each under the base schedule at
schedule.steps (the model's weights alone, not a learned schedule), read by the world's checker:

    prompt              accuracy  {objects of the prompt's shape drawn: images}
    four diamonds       0.81      {3: 2, 4: 13, 5: 1}

    python bench/counting_probe.py models/base models/trained [--samples 16] [--out reports/counting_probe.md]

A model folder is what the pretrain or train stage writes (a store entry's out/ or a checkpoint's model/ too).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def counting_specs(shapes: list[str]) -> list[dict]:
    from cogrpo.world.prompts import _np

    return [{"tag": "counting", "include": [{"class": s, "count": n}], "exclude": [{"class": s, "count": n + 1}],
             "prompt": f"a photo of {_np(n, s)}"}
            for n in (1, 2, 3, 4) for s in shapes]


def probe(model: Path, params, specs: list[dict], samples: int) -> list[tuple[float, Counter]]:
    from cogrpo.backbones.loading import load_generator
    from cogrpo.benchmarks.geneval import generate
    from cogrpo.core.schedule import base_knobs
    from cogrpo.world.checker import Checker
    from cogrpo.world.scenes import World

    checker = Checker(World(params.world))
    gen = load_generator(params.model, {"model": model, "tokenizer": Path("models/tokenizer")})
    traj = generate(gen, [s["prompt"] for s in specs], base_knobs(params.schedule), samples, seed=99)
    images = gen.decode(traj.tokens)
    rows = []
    for i, spec in enumerate(specs):
        shape, drawn, correct = spec["include"][0]["class"], Counter(), 0
        for img in images[i * samples:(i + 1) * samples]:
            drawn[sum(o.shape == shape for o in checker.detect(img).objects)] += 1
            correct += checker.check(img, spec).correct
        rows.append((correct / samples, drawn))
    return rows


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    from adapters.env import apply_defaults

    apply_defaults()
    from cogrpo.validate import load_params
    from cogrpo.world.prompts import HeldOut

    params = load_params("params.yaml", {})
    torch.set_num_threads(params.threads)
    specs = counting_specs(list(params.world.shapes))
    held = HeldOut.from_json(Path("data/prompts/heldout.json").read_text())
    results = {m: probe(m, params, specs, args.samples) for m in args.models}
    lines = [f"# Counting per prompt: accuracy and {{objects of the shape drawn: images}}, {args.samples} images each", "",
             f"`python bench/counting_probe.py {' '.join(map(str, args.models))} --samples {args.samples}`; base "
             f"schedule at {params.schedule.steps} steps; * marks a held-out prompt (data/prompts/heldout.json).", "",
             "| prompt | " + " | ".join(str(m) for m in args.models) + " |", "|---|" + "---|" * len(args.models)]
    for i, spec in enumerate(specs):
        cells = [f"{acc:.2f} {dict(sorted(drawn.items()))}" for acc, drawn in (results[m][i] for m in args.models)]
        inc = spec["include"][0]
        mark = " *" if (inc["count"], inc["class"]) in held.counts else ""
        lines.append(f"| {spec['prompt'].removeprefix('a photo of ')}{mark} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
