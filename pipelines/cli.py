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


def run_main(body: Callable[[], object]) -> object:
    """Run an entry point's body with the defaults applied; InputError / FileNotFoundError → one line, exit 2."""
    apply_defaults()
    from prefect.logging.configuration import setup_logging

    setup_logging()
    for handler in logging.getLogger().handlers:
        handler.addFilter(_traceback_free)
    try:
        return body()
    except (InputError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
