"""The supervisor of a training in several processes: torchrun over `train.processes` copies of
pipelines/train_ranks.py, each handed the run as one typed record (`TrainingJob`), waited for, stopped whole.

The launcher (flows/train.py) holds the run's lock and its reward server around `train_processes`. torchrun runs
in a process group of its own, stopped whole if the launcher stops, and ended by the kernel if the launcher is
killed outright (adapters/children.py), so no rank outlives it. A process that dies ends the run with one line
naming the log; the rerun resumes from the last checkpoint, under any number of processes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from adapters.children import die_with_parent
from adapters.progress import run_logger
from cogrpo.config import Params
from cogrpo.errors import InputError

ROOT = Path(__file__).resolve().parents[1]  # the processes import this checkout, whatever the working folder


class TrainingJob(BaseModel):
    """What the launcher hands every training process (written by `train_processes`, read by
    pipelines/train_ranks.py): the run's params, its folders (absolute), the MLflow run rank 0 logs to, the
    reward server's URL and health, and where rank 0 writes the stage's result."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    params: Params
    inputs: dict[str, Path]
    out: Path
    state_dir: Path
    run_id: str | None
    reward_url: str | None
    served: dict[str, Any]
    result: Path

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.model_dump(mode="json")))

    @classmethod
    def read(cls, path: str | Path) -> "TrainingJob":
        try:
            return cls.model_validate(json.loads(Path(path).read_text()))
        except (ValidationError, json.JSONDecodeError) as err:
            raise InputError(f"{path}: not a training job ({str(err).splitlines()[0]})") from None


def torchrun_command(params: Params, job: Path) -> list[str]:
    """torchrun over train.processes processes: all on this machine (--standalone), or processes / nodes on each
    of train.nodes machines meeting at train.rendezvous (the same command on every node)."""
    cfg = params.train
    where = (["--standalone"] if cfg.nodes == 1 else
             [f"--nnodes={cfg.nodes}", "--rdzv_backend=c10d", f"--rdzv_endpoint={cfg.rendezvous}"])
    return [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc_per_node={cfg.processes // cfg.nodes}",
            "-m", "pipelines.train_ranks", str(job)]


def train_processes(params: Params, inputs: dict[str, Path], out: Path, state_dir: Path, run_id: str | None,
                    reward_url: str | None, served: dict) -> dict:
    """train.processes copies of pipelines/train_ranks.py under torchrun (one machine; docs/processes.md for several);
    returns the stage's result, as rank 0 wrote it."""
    job, log, result = state_dir / "processes.json", state_dir / "processes.log", state_dir / "processes_result.json"
    result.unlink(missing_ok=True)
    TrainingJob(params=params, inputs={k: v.resolve() for k, v in inputs.items()}, out=out.resolve(),
                state_dir=state_dir.resolve(), run_id=run_id, reward_url=reward_url, served=served,
                result=result.resolve()).write(job)
    command = torchrun_command(params, job.resolve())
    run_logger().info(f"training in {params.train.processes} processes: {' '.join(command)} (log: {log})")
    path = [str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH")]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, path))}
    if params.train.nodes > 1:  # any node may hold rank 0, which logs, checkpoints and exports: hence shared
        run_logger().warning(f"waiting for the other {params.train.nodes - 1} nodes: run there, from "
                             f"{Path.cwd()} on the shared file system, `PYTHONPATH={env['PYTHONPATH']} "
                             f"{' '.join(['torchrun'] + command[3:])}`")
    with open(log, "w") as fh:  # its own process group, stopped whole if this run stops, and torchrun (which
        # then stops its ranks) ended by the kernel if this process is killed outright: no orphaned ranks
        proc = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=die_with_parent)
        try:
            while proc.poll() is None:  # waits in short sleeps: a Ctrl-C delivered to another of this process's
                time.sleep(0.2)  # threads (Prefect's) must find the main thread in Python, not blocked in waitpid
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    if proc.returncode != 0 or not result.is_file():
        raised = re.findall(r"\b(\w+(?:Error|Exception): .*)", log.read_text(errors="replace"))
        said = [r for r in raised if not r.startswith("ChildFailedError")] or ["no exception in the log"]
        raise InputError(f"train: a training process failed (torchrun exit {proc.returncode}): {said[-1][:300]}; "
                         f"log: {log}; rerun to resume from the last checkpoint")
    return json.loads(result.read_text())
