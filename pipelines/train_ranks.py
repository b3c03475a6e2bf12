"""One process of a data-parallel training: torchrun starts train.processes of these (adapters/torchrun.py's
train_processes writes the job they read, a `TrainingJob`: params, folders, the MLflow run, the reward server).

Each joins the process group (NCCL on GPUs, one per process by LOCAL_RANK; gloo on CPUs) and runs the training
loop on its share of every iteration's prompts; rank 0 logs to the MLflow run, writes checkpoints, exports the
model and writes the result file the launcher returns.
"""

import os
import sys
from datetime import timedelta


def main(job_file: str) -> None:
    from adapters.env import apply_defaults

    apply_defaults()
    import torch
    import torch.distributed as dist

    from adapters import tracking
    from adapters.torchrun import TrainingJob
    from cogrpo.core.distributed import backend_spec, current
    from cogrpo.io import write_json
    from flows.train import loop

    job = TrainingJob.read(job_file)
    if torch.cuda.is_available() and job.params.model.device in ("auto", "cuda"):  # one GPU per process
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend_spec(), timeout=timedelta(minutes=30))
    ranks = current()
    run_id = job.run_id if ranks.rank == 0 else None
    if run_id:
        tracking.setup()
    try:
        result = loop(job.params, job.inputs, job.out, job.state_dir, run_id, job.reward_url, job.served,
                      as_tasks=False, ranks=ranks)
        if ranks.rank == 0:
            write_json(job.result, result)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
