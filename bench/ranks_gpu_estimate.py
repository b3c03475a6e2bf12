"""The iteration time of Co-GRPO on N GPUs (aMUSEd-256), estimated from what one H200 measured per step.

No multi-GPU machine was available, so this is arithmetic on measured figures, with its assumptions stated:
an iteration of B·G trajectories over N ranks gives each rank B·G/N of them; a rank's rollout and update time per
step at that size lie between the linear share of the measured time (the GPU saturated) and the measured time at
the measured batch (latency-bound: the measured sampler ran far below the GPU's GEMM rate); after the update's
backward, the trained parameters' fp32 gradients are all-reduced once (ring: 2·(N-1)/N of their bytes through
each GPU's link). Decoding and reward scoring are left out (they split over ranks the same way).

    python bench/ranks_gpu_estimate.py [--measured reports/amused_cost_256_h200_ckpt.json] [--gpus 8]
Writes reports/ranks_gpu_estimate.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

LINK_GB_S = 300.0  # all-reduce bus bandwidth assumed for 8 NVLink-connected H200s (NCCL reaches ~350-480 GB/s)
LATENCY_S = 50e-6  # per all-reduce


def estimate(run: dict, batch: int, group: int, steps: int, step_fraction: float, gpus: int) -> dict:
    trajectories, measured = batch * group, run["batch"]
    per_rank = trajectories // gpus
    trained = round(step_fraction * steps)

    def phase(per_step_at_measured: float, n: int) -> tuple[float, float]:
        """(saturated, latency-bound) seconds per step for n trajectories: linear in n above the measured batch."""
        linear = per_step_at_measured * n / measured
        return linear, per_step_at_measured if n < measured else linear

    roll_lo, roll_hi = phase(run["rollout_s_per_step"], per_rank)
    upd_lo, upd_hi = phase(run["update_s_per_trained_step"], per_rank)
    one_roll, one_upd = phase(run["rollout_s_per_step"], trajectories)[0], phase(run["update_s_per_trained_step"],
                                                                                  trajectories)[0]
    grad_bytes = 4 * run["trained_params"]
    allreduce = LATENCY_S + 2 * (gpus - 1) / gpus * grad_bytes / (LINK_GB_S * 1e9)
    one_gpu = steps * one_roll + trained * one_upd
    low = steps * roll_lo + trained * upd_lo + allreduce
    high = steps * roll_hi + trained * upd_hi + allreduce
    return {"gpus": gpus, "trajectories": trajectories, "per_rank": per_rank, "steps": steps, "trained_steps": trained,
            "one_gpu_s": one_gpu, "n_gpu_s_low": low, "n_gpu_s_high": high, "allreduce_s": allreduce,
            "speedup_low": one_gpu / high, "speedup_high": one_gpu / low, "grad_mib": grad_bytes / 2**20}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measured", default="reports/amused_cost_256_h200_ckpt.json")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16, help="prompts per iteration")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--step-fraction", type=float, default=0.5)
    ap.add_argument("--out", default="reports/ranks_gpu_estimate.json")
    args = ap.parse_args(argv)
    (run,) = [r for r in json.loads(Path(args.measured).read_text())["runs"] if r["dtype"] == "bf16"]
    result = estimate(run, args.batch, args.group, args.steps, args.step_fraction, args.gpus) | {
        "measured": args.measured, "device": run["device"], "link_gb_s_assumed": LINK_GB_S}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['trajectories']} trajectories, {args.steps} steps ({result['trained_steps']} trained): one GPU "
          f"{result['one_gpu_s']:.1f} s/iteration; {args.gpus} GPUs {result['n_gpu_s_low']:.1f}–"
          f"{result['n_gpu_s_high']:.1f} s ({result['speedup_low']:.1f}–{result['speedup_high']:.1f}×), of which the "
          f"gradient all-reduce ({result['grad_mib']:.0f} MiB) {1e3 * result['allreduce_s']:.2f} ms")
    return result


if __name__ == "__main__":
    main()
