"""Co-GRPO learns through diffusers' aMUSEd modules and peft's LoRA: a tiny random aMUSEd on the CPU, rewarded by
`colour_match` (how much of the image is near the colour its prompt names), in each mode.

The same library path as a real run (AmusedGenerator → sampler → CoGRPO update), without the stages around it.
Reports the reward of the first and last fifth of the iterations, and the deterministic-schedule reward of the
model before and after on fixed seeds. Writes reports/amused_learning.json.

    python bench/amused_learning.py                       # every mode (co, model, schedule, alternate)
    python bench/amused_learning.py --modes co --iterations 20
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from cogrpo.backbones.amused import AmusedGenerator
from cogrpo.backbones.tiny_amused import make_tiny_amused
from cogrpo.config import MODES, ModelConfig, ScheduleConfig, TrainConfig
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.sampler import sample
from cogrpo.core.schedule import base_knobs
from cogrpo.core.trainer import CoGRPO
from cogrpo.rewards.pixels import colour_match

PROMPTS = ["a red apple", "a blue car", "a green field", "a yellow flower", "a purple hat", "a cyan sea"]
# adapters on the attention (as diffusers' train_amused.py) and on the token head, which a colour reward mostly needs
# to move (aMUSEd and Meissonic name it alike)
LORA = dict(lora_rank=8, lora_alpha=16, lora_targets=["to_q", "to_k", "to_v", "mlm_layer.conv2"], device="cpu")


def amused(folder: Path) -> AmusedGenerator:
    return AmusedGenerator(folder, ModelConfig(backbone="amused", pretrained=str(folder), **LORA))


def learn(make_generator: Callable, folder: Path, mode: str, iterations: int, lr_model: float, lr_schedule: float,
          seed: int = 0) -> dict:
    torch.manual_seed(seed)  # the adapters' initialisation
    gen = make_generator(folder)
    schedule = ScheduleConfig(steps=6, remask_temperature=2.0, remask_anneal="to_zero", cfg=3.0)
    cfg = TrainConfig(mode=mode, seed=seed, prompts_per_iter=len(PROMPTS), group_size=8, lr_model=lr_model,
                      lr_schedule=lr_schedule, kl_beta=0.0, iterations=iterations)
    trainer, reward = CoGRPO(gen, base_knobs(schedule), cfg), colour_match()
    batch = GroupedBatch(torch.arange(len(PROMPTS)), gen.encode(PROMPTS), cfg.group_size)
    prompts = [PROMPTS[r] for r in batch.trajectory_rows().tolist()]

    def deterministic_reward() -> float:
        traj = sample(gen, batch.trajectory_cond(), trainer.policy.deterministic_knobs(), torch.arange(len(prompts)))
        return reward(gen.decode(traj.tokens), prompts, []).mean().item()

    before, curve, start = deterministic_reward(), [], time.perf_counter()
    for _ in range(iterations):
        ro = trainer.rollout(batch)
        r = reward(gen.decode(ro.traj.tokens), prompts, [])
        curve.append(trainer.update(batch, ro, r)["reward_mean"])
    fifth = max(1, iterations // 5)
    return {"mode": mode, "iterations": iterations, "reward_first_fifth": sum(curve[:fifth]) / fifth,
            "reward_last_fifth": sum(curve[-fifth:]) / fifth, "deterministic_before": before,
            "deterministic_after": deterministic_reward(), "seconds_per_iteration": (time.perf_counter() - start) / iterations,
            "curve": curve}


def main(make_snapshot: Callable = make_tiny_amused, make_generator: Callable = amused,
         out: str = "reports/amused_learning.json") -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", nargs="+", default=list(MODES))
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--lr-model", type=float, default=1e-2)
    ap.add_argument("--lr-schedule", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=out)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_snapshot(Path(tmp) / "tiny")
        runs = [learn(make_generator, folder, m, args.iterations, args.lr_model, args.lr_schedule)
                for m in args.modes]
    for r in runs:
        print(f"{r['mode']:9s} reward {r['reward_first_fifth']:.4f} → {r['reward_last_fifth']:.4f} (rollouts), "
              f"{r['deterministic_before']:.4f} → {r['deterministic_after']:.4f} (deterministic schedule), "
              f"{r['seconds_per_iteration']:.2f} s/iteration")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
