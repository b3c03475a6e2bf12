"""What every entry point shares: environment defaults first, and bad input as one line with exit status 2."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from adapters.env import apply_defaults
from cogrpo.errors import InputError


def _traceback_free(record: logging.LogRecord) -> bool:
    """Console filter: a task or flow that failed on bad input logs no traceback (the UI still gets it)."""
    return not (record.exc_info and isinstance(record.exc_info[1], (InputError, FileNotFoundError)))


def run_main(body: Callable[[], object], check: Callable[[], object] = lambda: None) -> object:
    """Run an entry point: the defaults applied, check() (input validation: fails in a second, before Prefect
    starts), then body() against a Prefect API of its own unless PREFECT_API_URL names one.
    InputError / FileNotFoundError → one line, exit 2. Ctrl-C → one line, exit 130: the MLflow run is KILLED,
    the Prefect run crashed, the last checkpoint kept, the temporary server stopped."""
    apply_defaults()
    from prefect.logging.configuration import setup_logging

    from adapters.prefect_api import temporary_api

    setup_logging()
    for handler in logging.getLogger().handlers:
        handler.addFilter(_traceback_free)
    try:
        check()
        with temporary_api():
            return body()
    except (InputError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("interrupted: the run is marked KILLED; its last checkpoint is kept, rerun to resume", file=sys.stderr)
        raise SystemExit(130) from None
