"""A temporary Prefect API for command-line runs, owned by the run: it does not die on Ctrl-C, and it does not
outlive its run.

Without PREFECT_API_URL, Prefect starts its own temporary server as a child in the same process group, so
Ctrl-C in a terminal (SIGINT to the whole group) kills the server first and the run then spends minutes
retrying a dead API; and a `kill -9` of the run leaves the server orphaned. This one runs the same server in
its own session (Ctrl-C reaches only the run, which then records its end and stops the server) and asks the
kernel to end it when the run's process dies, however it dies.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from adapters.children import die_with_parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _drain() -> None:
    """Send the logs and events still queued before the server stops (as Prefect's own test harness does)."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain() -> None:
        try:
            result = APILogWorker.instance().drain()
            if inspect.isawaitable(result):
                await result
        except RuntimeError:  # never started
            pass
        result = EventsWorker.drain_all()
        if inspect.isawaitable(result):
            await result

    run_coro_as_sync(drain())


@contextlib.contextmanager
def temporary_api(timeout_s: float = 180) -> Iterator[str | None]:
    """Point Prefect at a server of this process's own for the block; yields its URL (None when PREFECT_API_URL
    is already set: a running `prefect server start` or a test harness)."""
    if os.environ.get("PREFECT_API_URL"):
        yield None
        return
    import httpx
    from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL, get_current_settings, temporary_settings

    port = _free_port()
    env = os.environ | get_current_settings().to_environment_variables(exclude_unset=True) | {
        "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "error", "--lifespan", "on"],
        env=env, start_new_session=True, preexec_fn=die_with_parent)
    url = f"http://127.0.0.1:{port}/api"
    try:
        end = time.monotonic() + timeout_s
        while True:  # a fresh database migrates first: tens of seconds on 2 cores
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"the temporary Prefect server did not start (exit {server.poll()})")
            time.sleep(0.5)
        # no UI URL: Prefect prints no "View at" link that dies with this server
        link_free = {"PREFECT_API_URL": url, "PREFECT_UI_URL": ""}
        before = {key: os.environ.get(key) for key in link_free}
        with temporary_settings(updates={PREFECT_API_URL: url, PREFECT_UI_URL: ""}):
            os.environ.update(link_free)  # for subprocesses too
            try:
                yield url
            finally:
                _drain()
                for key, value in before.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


PID_TAG, HOST_TAG = "cogrpo.pid:", "cogrpo.host:"


def run_tags() -> list[str]:
    """Tags for the flow runs this process starts (`with prefect.tags(*run_tags())`): which process runs them, so
    that the next start can tell a run whose process was killed (crash_dead_runs)."""
    return [f"{PID_TAG}{os.getpid()}", f"{HOST_TAG}{socket.gethostname()}"]


def crash_dead_runs() -> list[str]:
    """Mark Crashed the flow runs of this host still RUNNING whose process is gone (kill -9, power loss: nothing
    could record their end); returns their names. Prefect cannot see such a death itself without a worker."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType,
                                                FlowRunFilterTags)
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed
    from prefect.utilities.asyncutils import run_coro_as_sync

    from cogrpo.io import process_alive

    async def crash() -> list[str]:
        async with get_client() as client:
            running = await client.read_flow_runs(flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING])),
                tags=FlowRunFilterTags(all_=[f"{HOST_TAG}{socket.gethostname()}"])))
            crashed = []
            for run in running:
                pids = [int(t.removeprefix(PID_TAG)) for t in run.tags if t.startswith(PID_TAG)]
                if pids and not process_alive(pids[0]):
                    await client.set_flow_run_state(run.id, Crashed(
                        message=f"its process ({pids[0]}) died without recording its end; marked by the next run"),
                        force=True)
                    crashed.append(run.name)
            return crashed

    return run_coro_as_sync(crash())
