"""`dvc repro` with one Prefect API for all its stages: `python -m pipelines.repro [dvc repro's arguments]`.

Each stage's command (`python -m pipelines.stage NAME`) starts a temporary Prefect server of its own unless
PREFECT_API_URL names one (adapters/prefect_api.py): 7–20 s a stage on 2 cores. This starts one for the whole
repro, which every stage then uses, and stops it after; when `dvc status` finds every stage up to date it starts
none. `make run` is this. Ctrl-C reaches dvc and the running stage (the terminal signals the whole process group),
which end with their one line; this waits for them, stops the server and exits with dvc's status.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator

from adapters.env import apply_defaults


def needs_api(args: list[str]) -> bool:
    """Whether `dvc repro args` may run a stage: any option (--force, --downstream, … : not worth mirroring
    dvc's rules for each), or a stale stage among the targets (every stage without targets)."""
    if any(a.startswith("-") for a in args):
        return True
    status = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", *args], capture_output=True, text=True)
    if status.returncode != 0:
        return True  # let `dvc repro` report it in its own words
    return bool(json.loads(status.stdout or "{}"))


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ctrl-C is for the children here: they record their end; this process must outlive them."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def repro(args: list[str]) -> int:
    command = [sys.executable, "-m", "dvc", "repro", *args]
    if not needs_api(args):
        return subprocess.run(command).returncode
    from adapters.prefect_api import temporary_api

    with temporary_api(), sigint_ignored():
        return subprocess.Popen(command).wait()


def main(argv: list[str] | None = None) -> None:
    apply_defaults()
    raise SystemExit(repro(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
