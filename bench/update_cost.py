"""Update cost per trained step ÷ rollout cost per step, measured in one run.

A rollout step is one decoding step for B·G trajectories (a CFG forward pair, no gradient); a trained step
is the GRPO update's share for one of the trained steps (recompute forward + backward through θ, the
reference forward for the KL, φ's log-prob). Uses params.yaml's train section and the pipeline's base
model when present (else a random model of the same config).
Usage: python bench/update_cost.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from cogrpo.backbones.embedded import EmbeddedGenerator
from cogrpo.backbones.mdm import MDM, MDMConfig
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.generator import Condition
from cogrpo.core.schedule import base_knobs
from cogrpo.core.trainer import CoGRPO
from cogrpo.validate import load_params


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--text-tokens", type=int, default=24)
    ap.add_argument("--out", default="reports/update_cost.json")
    args = ap.parse_args()
    params = load_params()
    torch.set_num_threads(params.pretrain.threads)
    if Path("models/base/config.json").is_file():
        model = MDM.load("models/base")
    else:
        m = params.model
        model = MDM(MDMConfig(params.world.grid, len(params.world.shapes), len(params.world.colors), m.text_encoder,
                              384, m.max_text_tokens, m.dim, m.layers, m.heads)).eval()
    cfg = params.train.model_copy(update={"mode": "co"})
    B, T = cfg.prompts_per_iter, params.schedule.steps
    text = torch.randn(B, args.text_tokens, model.cfg.text_dim)
    mask = torch.ones(B, args.text_tokens, dtype=torch.bool)
    trainer = CoGRPO(EmbeddedGenerator(model, text=None, tokenizer=None), base_knobs(params.schedule), cfg)
    rewards = torch.rand(B * cfg.group_size)
    batch = GroupedBatch(torch.arange(B), Condition({"text": text, "text_mask": mask}), cfg.group_size)
    trainer.update(batch, trainer.rollout(batch), rewards)  # warm-up
    rollout_s = update_s = 0.0
    for _ in range(args.repeats):
        start = time.perf_counter()
        ro = trainer.rollout(batch)
        rollout_s += time.perf_counter() - start
        start = time.perf_counter()
        trainer.update(batch, ro, rewards)
        update_s += time.perf_counter() - start
    trained = max(1, math.ceil(cfg.step_fraction * T)) * cfg.inner_epochs
    per_rollout_step = rollout_s / args.repeats / T
    per_trained_step = update_s / args.repeats / trained
    report = {"trajectories": B * cfg.group_size, "steps": T, "trained_steps_per_update": trained,
              "rollout_s_per_step": per_rollout_step, "update_s_per_trained_step": per_trained_step,
              "ratio": per_trained_step / per_rollout_step}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
