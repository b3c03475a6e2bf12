"""Start the reward server (in .venv-reward):

    .venv-reward/bin/python -m reward_server --config rewards.json [--port 8765] [--ready-file F] [--parent-pid P]

rewards.json says which models to load (reward_server.models.load_all). The server writes {"url", "pid"} to the
ready file once every model is loaded and it listens; with --parent-pid it exits when that process is gone, so
a server started for a run never outlives it (even a kill -9 of the run). A model that cannot load ends it with
one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from reward_server.app import make_server
from reward_server.models import ConfigError, load_all, pick_device


def _exit_with(parent: int) -> None:
    """The server is its run's child: when the run dies (however: a zombie not yet reaped counts as dead, a
    reused pid does not fool it) the server is handed to another parent, and exits."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, type=Path)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: any free port (the ready file says which)")
    ap.add_argument("--ready-file", type=Path)
    ap.add_argument("--parent-pid", type=int)
    args = ap.parse_args()
    if args.parent_pid:
        threading.Thread(target=_exit_with, args=(args.parent_pid,), daemon=True).start()
    try:
        config = json.loads(args.config.read_text())
        models = load_all(config)
    except (ConfigError, OSError, json.JSONDecodeError) as exc:
        print(f"reward server: {exc}", file=sys.stderr)
        sys.exit(2)
    if not models:
        print(f"reward server: {args.config} configures no reward model", file=sys.stderr)
        sys.exit(2)
    server = make_server(models, args.host, args.port, pick_device(config.get("device", "auto")),
                         int(config.get("chunk", 32)))
    url = f"http://{args.host}:{server.server_address[1]}"
    if args.ready_file:
        tmp = args.ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": url, "pid": os.getpid(), "rewards": sorted(models)}))
        tmp.replace(args.ready_file)
    print(f"reward server: {', '.join(sorted(models))} at {url}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
