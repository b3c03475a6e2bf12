#!/usr/bin/env bash
# Issue 3's investigation, one training at a time (2 cores): the three-mode ablation with 3 seeds, then `co`
# with one knob changed per variant at the same rollout budget, then training at half the steps.
# Each line writes reports/<name>.{json,md}; rerun a line alone to redo one variant.
set -euo pipefail
cd "$(dirname "$0")/.."
A="python bench/ablation.py"
$A --seeds 0 1 2 --out reports/ablation
for variant in \
    'lr_sched_003:{"lr_schedule": 0.03}' \
    'lr_sched_03:{"lr_schedule": 0.3}' \
    'sigma_015:{"sigma_init": 0.15, "sigma_floor": 0.03}' \
    'step_frac_05:{"step_fraction": 0.5}' \
    'group_16:{"group_size": 16, "prompts_per_iter": 8}' \
    'kl_02:{"kl_beta": 0.2}'; do
  $A --modes co --seeds 0 1 --steps 4 8 --skip-base --train "${variant#*:}" --out "reports/co_${variant%%:*}"
done
$A --modes model co --seeds 0 1 --steps 2 4 8 --train-steps 4 --out reports/ablation_t4
