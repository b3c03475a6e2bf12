"""P2 (issue 14): the GRPO update's cost per trained step against a rollout step's, in time and in FLOPs, one run.

A rollout step is one decoding step for B·G trajectories (a CFG forward pair, no gradient); a trained step is the
update's share for one of the trained steps (the recompute forward and backward through θ, the reference forward
for the KL, φ's log-prob). FLOPs are counted by torch's FlopCounterMode (bench/flops.py: with attention) over one
rollout and one update, so

    P2 = (update s per trained step ÷ rollout s per step) ÷ (update FLOPs per trained step ÷ rollout FLOPs per step)

is how much less efficiently the update spends its FLOPs than the sampler does (goal ≤ 1.2). The rollout's and
the update's operators, by self CPU time, are profiled in the same run (`profile`): where the time goes.
Uses params.yaml's train section and the pipeline's base model when present (else a random model of the same
config). Usage: python bench/update_cost.py [--repeats 7] [--set '{"train.micro_batch": 32}'] [--out ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from cogrpo.backbones.embedded import EmbeddedGenerator
from cogrpo.backbones.mdm import MDM, MDMConfig
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.generator import Condition
from cogrpo.core.schedule import base_knobs
from cogrpo.core.trainer import CoGRPO
from cogrpo.validate import load_params

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.flops import count_flops  # noqa: E402


def top_ops(fn, top: int) -> list[dict]:
    """fn's operators with the most self CPU time, and their share of it."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    return [{"op": e.key, "self_ms": e.self_cpu_time_total / 1e3, "calls": e.count,
             "share": e.self_cpu_time_total / total} for e in events[:top]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--text-tokens", type=int, default=24)
    ap.add_argument("--top", type=int, default=15, help="operators listed in the profile")
    ap.add_argument("--set", default="{}", help="params overrides, JSON")
    ap.add_argument("--out", default="reports/update_cost.json")
    args = ap.parse_args()
    params = load_params("params.yaml", json.loads(args.set))
    torch.set_num_threads(params.threads)
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
    ro = trainer.rollout(batch)
    trainer.update(batch, ro, rewards)  # warm-up
    trained = max(1, math.ceil(cfg.step_fraction * T)) * cfg.inner_epochs
    # the counted and profiled calls also step the optimisers: the weights differ between calls, the shapes do not
    rollout_flops = count_flops(lambda: trainer.rollout(batch)) / T
    update_flops = count_flops(lambda: trainer.update(batch, ro, rewards)) / trained
    rollout_s, update_s = [], []  # per repeat: the machine is noisy, P2 is the median of the repeats' ratios
    for _ in range(args.repeats):
        start = time.perf_counter()
        ro = trainer.rollout(batch)
        rollout_s.append((time.perf_counter() - start) / T)
        start = time.perf_counter()
        trainer.update(batch, ro, rewards)
        update_s.append((time.perf_counter() - start) / trained)
    flop_ratio = update_flops / rollout_flops
    p2 = [u / r / flop_ratio for u, r in zip(update_s, rollout_s)]
    per_rollout_step, per_trained_step = statistics.median(rollout_s), statistics.median(update_s)
    report = {"set": json.loads(args.set), "trajectories": B * cfg.group_size, "steps": T,
              "trained_steps_per_update": trained,
              "rollout_s_per_step": per_rollout_step, "update_s_per_trained_step": per_trained_step,
              "rollout_gflop_per_step": rollout_flops / 1e9, "update_gflop_per_trained_step": update_flops / 1e9,
              "time_ratio": statistics.median(u / r for u, r in zip(update_s, rollout_s)),
              "flop_ratio": flop_ratio, "P2": statistics.median(p2), "P2_repeats": p2,
              "rollout_gflops": rollout_flops / per_rollout_step / 1e9,
              "update_gflops": update_flops / per_trained_step / 1e9,
              "profile": {"rollout": top_ops(lambda: trainer.rollout(batch), args.top),
                          "update": top_ops(lambda: trainer.update(batch, ro, rewards), args.top)}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "profile"}, indent=1))
    for phase, ops in report["profile"].items():
        print(phase)
        for e in ops:
            print(f"{e['share']:6.1%} {e['self_ms']:9.1f} ms {e['calls']:6d}  {e['op']}")


if __name__ == "__main__":
    main()
