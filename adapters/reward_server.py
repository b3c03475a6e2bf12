"""The reward server of one run: started in the reward environment when the run needs it, stopped when it ends.

`serve(params.reward_models, terms, workdir)` yields the URL the served reward terms are scored at: that of
`reward_models.url` when one is given (checked: it must serve them), else of a server this process starts
(`python -m reward_server` with .venv-reward's Python, its log in workdir/reward_server.log). The server
is in its own session, so a Ctrl-C meant for the run does not kill it mid-batch, and it watches this process:
when the run ends, however it ends (kill -9 included), the server ends too.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from cogrpo.errors import InputError
from cogrpo.rewards import SERVED, Term
from cogrpo.rewards.remote import RewardClient, server_config

ROOT = Path(__file__).resolve().parents[1]  # the repository: reward_server/ is imported from here


def _check_serves(url: str, labels: list[str], timeout_s: float) -> dict:
    health = RewardClient(url, timeout_s).health()
    missing = [label for label in labels if label not in health.get("rewards", {})]
    if missing:
        raise InputError(f"reward_models.url: the server at {url} does not serve {missing} "
                         f"(it serves {sorted(health.get('rewards', {}))})")
    return health


def _last_line(log: Path) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.is_file() else []
    said = [ln for ln in lines if ln.startswith("reward server:")]
    return (said or lines or ["(no output)"])[-1]


@contextlib.contextmanager
def serve(cfg, terms: Sequence[Term], workdir: Path) -> Iterator[tuple[str | None, dict]]:
    """(URL, the server's health: reward → package, checkpoint, sha256) for the block; (None, {}) when no term
    is served."""
    labels = sorted({t.label for t in terms if t.name in SERVED})
    if not labels:
        yield None, {}
        return
    if cfg.url:
        yield cfg.url, _check_serves(cfg.url, labels, cfg.request_timeout_s)
        return
    workdir = workdir.resolve()  # the server works in a scratch directory of its own
    workdir.mkdir(parents=True, exist_ok=True)
    config, ready, log = workdir / "reward_server.json", workdir / "reward_server.ready", workdir / "reward_server.log"
    config.write_text(json.dumps(server_config(cfg, [t for t in terms if t.name in SERVED]), indent=1))
    ready.unlink(missing_ok=True)
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    with open(log, "w") as log_fh:
        proc = subprocess.Popen([str(Path(cfg.python).absolute()), "-m", "reward_server", "--config", str(config),
                                 "--ready-file", str(ready), "--parent-pid", str(os.getpid())],
                                stdout=log_fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + cfg.startup_timeout_s
        while not ready.is_file():
            if proc.poll() is not None:
                raise InputError(f"the reward server did not start: {_last_line(log)} (log: {log})")
            if time.monotonic() > deadline:
                raise InputError(f"the reward server did not load its models within {cfg.startup_timeout_s:.0f} s "
                                 f"(reward_models.startup_timeout_s; log: {log})")
            time.sleep(0.2)
        url = json.loads(ready.read_text())["url"]
        yield url, _check_serves(url, labels, cfg.request_timeout_s)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pin_models(state_dir: Path, health: dict) -> None:
    """A run's reward models are part of what it trains on, but params name only their paths: the first start
    records the served checkpoints' sha256s in the run's folder, and a resume with other files is refused."""
    served = {name: info.get("sha256") for name, info in health.get("rewards", {}).items()}
    record = state_dir / "reward_models.json"
    if not served:
        return
    if record.is_file():
        before = json.loads(record.read_text())
        if before != served:
            raise InputError(f"{record}: this run was trained with reward checkpoints {before}, the server now "
                             f"serves {served}; put new weights under a new path (a new run), or remove {state_dir}")
    else:
        record.write_text(json.dumps(served, indent=1, sort_keys=True) + "\n")
