"""What every entry point shares: environment defaults first, and bad input as one line with exit status 2."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

import httpx

from adapters.env import apply_defaults
from cogrpo.errors import InputError


def _traceback_free(record: logging.LogRecord) -> bool:
    """Console filter: a task or flow that failed on bad input or on the file system logs no traceback (the UI still
    gets it): run_main says what went wrong in one line."""
    return not (record.exc_info and isinstance(record.exc_info[1], (InputError, OSError)))


def _unreachable_api(err: BaseException) -> bool:
    """Prefect's words (or httpx's) for an API that is not there."""
    return isinstance(err, httpx.ConnectError) or str(err).startswith("Failed to reach API at")


def run_main(body: Callable[[], object], check: Callable[[], object] = lambda: None) -> object:
    """Run an entry point: the defaults applied, check() (input validation: fails in a second, before Prefect
    starts), then body() against a Prefect API of its own unless PREFECT_API_URL names one.
    InputError / FileNotFoundError → one line, exit 2. A file-system failure (disk full, no permission) or a Prefect
    API that does not answer → one line, exit 1. Ctrl-C → one line, exit 130: the MLflow run is KILLED, the Prefect
    run crashed, the last checkpoint kept, the temporary server stopped. Flow runs are tagged with this process,
    and runs of this host left RUNNING by a killed process are marked Crashed first."""
    apply_defaults()
    from prefect import tags
    from prefect.logging.configuration import setup_logging

    from adapters.prefect_api import crash_dead_runs, run_tags, temporary_api

    setup_logging()
    for handler in logging.getLogger().handlers:
        handler.addFilter(_traceback_free)
    try:
        check()
        with temporary_api(), tags(*run_tags()):
            crash_dead_runs()
            return body()
    except (InputError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as err:  # the file system: no space left, no permission, a read-only folder
        print(f"error: {err.filename + ': ' if err.filename else ''}{err.strerror or err}", file=sys.stderr)
        raise SystemExit(1) from None
    except (RuntimeError, httpx.HTTPError) as err:
        if not _unreachable_api(err):
            raise
        print(f"error: the Prefect API at {os.environ.get('PREFECT_API_URL')} does not answer: start it "
              "(`prefect server start`) or unset PREFECT_API_URL to let the run start one of its own", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        print("interrupted: the run is marked KILLED; its last checkpoint is kept, rerun to resume", file=sys.stderr)
        raise SystemExit(130) from None
