"""What GRPO sees on the counting prompts: every counting group of a training, its objects drawn and rewards.

Replays the train stage's loop in this process (the same TrainingSession: prompts, rollouts, rewards and updates,
so the same run as `dvc repro train` with these params) and prints, for each counting group of each iteration, the
count asked, then per sample the objects of that shape drawn and the training reward, sorted by count:

    it 15 four circle   3:0.67 3:0.67 3:0.67 3:0.67 3:0.67 3:0.67 4:1.00 6:0.33

    python bench/counting_groups.py [--set '{"train.seed": 1}'] [--count 4] > counting_groups.txt

Reads the workspace's data/prompts, models/tokenizer and models/base (run `dvc repro pretrain` first); writes
nothing but a temporary state folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="{}", help="params overrides, JSON")
    ap.add_argument("--count", type=int, default=None, help="only the prompts asking for this many")
    args = ap.parse_args(argv)
    from adapters.env import apply_defaults

    apply_defaults()
    from cogrpo.validate import load_params
    from cogrpo.world.checker import Checker
    from cogrpo.world.prompts import NUMBERS
    from cogrpo.world.scenes import World
    from tasks.train import TrainingSession

    params = load_params("params.yaml", json.loads(args.set))
    inputs = {"prompts": Path("data/prompts"), "tokenizer": Path("models/tokenizer"), "model": Path("models/base")}
    checker, G = Checker(World(params.world)), params.train.group_size
    with tempfile.TemporaryDirectory() as state:
        session = TrainingSession(params, inputs, Path(state), warn=print)
        for it in range(1, params.train.iterations + 1):
            batch = session.draw_batch()
            rollout = session.trainer.rollout(batch)
            scores = session.score(batch, rollout)
            images = session.generator.decode(rollout.traj.tokens)
            rows = batch.trajectory_rows().tolist()
            for g in range(len(rows) // G):
                spec = session.specs[rows[g * G]]
                if spec["tag"] != "counting" or args.count not in (None, spec["include"][0]["count"]):
                    continue
                shape, n = spec["include"][0]["class"], spec["include"][0]["count"]
                drawn = [sum(o.shape == shape for o in checker.detect(images[g * G + j]).objects) for j in range(G)]
                reward = scores["total"][g * G:(g + 1) * G].tolist()
                pairs = " ".join(f"{d}:{r:.2f}" for d, r in sorted(zip(drawn, reward)))
                print(f"it {it:2d} {NUMBERS[n]} {shape:8s} {pairs}", flush=True)
            session.update(batch, rollout, scores)


if __name__ == "__main__":
    main()
