#!/usr/bin/env bash
# Issue 3's investigation, one training at a time (2 cores): the three-mode ablation with 3 seeds; `co` with
# one train key changed per variant at the same rollout budget (2 seeds, 8 steps); half the reward strict;
# training at half the steps. Each line writes reports/<name>.{json,md}; rerun a line alone to redo it.
# bench/summarize_investigation.py then gathers reports/co_investigation.md.
set -euo pipefail
cd "$(dirname "$0")/.."
A="python bench/ablation.py"
[ "${SKIP_ABLATION:-0}" = 1 ] || $A --seeds 0 1 2 --out reports/ablation
for variant in \
    'lr_sched_03:{"lr_schedule": 0.3}' \
    'sigma_015:{"sigma_init": 0.15, "sigma_floor": 0.03}' \
    'step_frac_05:{"step_fraction": 0.5}' \
    'group_16:{"group_size": 16, "prompts_per_iter": 8}'; do
  $A --modes co --seeds 0 1 --steps 8 --skip-base --train "${variant#*:}" --out "reports/co_${variant%%:*}"
done
# the compositional reward gives partial credit to a wrong count; make half of it strict (all facts, clean)
$A --modes model co --seeds 0 1 --steps 4 8 --skip-base --out reports/co_mixed_reward \
   --train '{"rewards": [{"name": "compositional", "weight": 0.5}, {"name": "strict", "weight": 0.5}]}'
$A --modes model co --seeds 0 --steps 2 4 8 --train-steps 4 --out reports/ablation_t4
# three times the budget at half the steps: does the trend reach the base at full steps?
$A --modes co model --seeds 0 --steps 4 8 --skip-base --train-steps 4 --train '{"iterations": 120}' \
   --out reports/ablation_t4_long
python bench/summarize_investigation.py
