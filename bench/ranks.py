"""P9: a Co-GRPO iteration in 2 processes × 1 thread ÷ in 1 process × 2 threads, same global batch (goal ≤ 1.15:
the ranks' communication must be cheap). The default params' training session (embedded world, B·G trajectories)
on the workspace's prompts, tokenizer and base model (`dvc repro pretrain` first), gloo on this CPU; both runs also
report how far apart their models end (the 2 ranks must train what 1 process trains).

    python bench/ranks.py [--iterations 4]
Writes reports/ranks.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tasks/ and flows/ beside src/


def rank_main(rank: int, world: int, threads: int, folder: str, iterations: int) -> None:
    from cogrpo.core.distributed import Ranks
    from cogrpo.validate import load_params
    from tasks.train import TrainingSession

    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous{world}", rank=rank, world_size=world)
    params = load_params("params.yaml")
    inputs = {"prompts": Path("data/prompts"), "tokenizer": Path("models/tokenizer"), "model": Path("models/base")}
    session = TrainingSession(params, inputs, Path(folder) / f"state{world}", warn=print, ranks=Ranks(rank, world))
    torch.set_num_threads(threads)  # after the session, which sets params.threads
    times = []
    for _ in range(iterations + 1):  # the first is a warm-up
        start = time.perf_counter()
        batch = session.draw_batch()
        rollout = session.trainer.rollout(batch)
        session.update(batch, rollout, session.score(batch, rollout))
        if world > 1:
            dist.barrier()
        times.append(time.perf_counter() - start)
    if rank == 0:
        torch.save({"times": times[1:], "weights": [p.detach().clone() for p in session.trainer.trained],
                    "policy": {k: v.clone() for k, v in session.trainer.policies.state_dict().items()}},
                   f"{folder}/world{world}.pt")
    if world > 1:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--out", default="reports/ranks.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(rank_main, args=(1, 2, folder, args.iterations), nprocs=1, join=True)
        mp.spawn(rank_main, args=(2, 1, folder, args.iterations), nprocs=2, join=True)
        one, two = (torch.load(f"{folder}/world{w}.pt") for w in (1, 2))
    per_one, per_two = statistics.median(one["times"]), statistics.median(two["times"])
    drift = max([(a - b).abs().max().item() for a, b in zip(one["weights"], two["weights"])]
                + [(one["policy"][k] - two["policy"][k]).abs().max().item() for k in one["policy"]])
    report = {"P9_two_ranks_over_one_process": per_two / per_one, "one_process_2_threads_s": per_one,
              "two_ranks_1_thread_s": per_two, "iterations": args.iterations,
              "max_weight_difference_after": drift, "times_one": one["times"], "times_two": two["times"]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
