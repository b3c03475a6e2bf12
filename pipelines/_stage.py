"""What every DVC stage entry point shares: validate params.yaml first, run in an MLflow run, one-line errors."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from tasks import tracking  # first: it sets the environment defaults

from cogrpo.config import Params, load_params  # noqa: E402
from cogrpo.errors import InputError  # noqa: E402
from cogrpo.schedule import base_knobs  # noqa: E402

PARAMS_FILE = "params.yaml"


def _traceback_free(record: logging.LogRecord) -> bool:
    """Console filter: a task or flow that failed on bad input logs no traceback (the UI still gets it)."""
    return not (record.exc_info and isinstance(record.exc_info[1], (InputError, FileNotFoundError)))


def one_line_input_errors() -> None:
    """Bad input ends in one line naming the file or key, not in Prefect's tracebacks of the failed run."""
    from prefect.logging.configuration import setup_logging

    setup_logging()
    for handler in logging.getLogger().handlers:
        handler.addFilter(_traceback_free)


def run_stage(name: str, sections: list[str], body: Callable[[Params, str], dict],
              datasets: tuple[str, ...] = ()) -> dict:
    """Validate params, open an MLflow run logging the stage's params sections (and the base schedule, step by
    step), run body(params, run_id), log the numbers it returns and the prompt sets it used (names under
    data/prompts) as dataset inputs. Bad input exits with status 2 and one line naming the file or key; the
    MLflow run is then marked FAILED, never left RUNNING."""
    run_id = None
    one_line_input_errors()
    try:
        params = load_params(PARAMS_FILE)
        tracking.setup()
        tracking.fail_dead_runs()
        run_id = tracking.start_run(name, {"stage": name, "mode": params.train.mode})
        dumped = params.model_dump()
        tracking.log_params(run_id, {s: dumped[s] for s in sections})
        tracking.log_schedule(run_id, base_knobs(params.schedule).tolist(), "schedule.initial")
        result = body(params, run_id)
        tracking.log_metrics(run_id, result)
        for split in datasets:
            tracking.log_prompt_set(run_id, f"data/prompts/{split}.parquet", split)
        tracking.end_run(run_id)
        return result
    except (InputError, FileNotFoundError) as err:
        if run_id:
            tracking.end_run(run_id, failed=True)
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except BaseException:
        if run_id:
            tracking.end_run(run_id, failed=True)
        raise
