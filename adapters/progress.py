"""Progress and results where the user looks: a bar in the terminal, a progress artifact and log lines in the
Prefect UI (a run triggered from the UI shows how far it is), and the numbers as MLflow metrics.

Stage work reports through `report(label, done, total, **metrics)`; the library never imports Prefect.
"""

from __future__ import annotations

import logging
import time

from tqdm.auto import tqdm

from adapters import tracking

_fallback = logging.getLogger("cogrpo")


class _NoTracebackOfAFailedState(logging.Filter):
    """Drops the record Prefect's flow engine logs ("Engine execution exited with unexpected exception", a 40-line
    traceback) when a flow run ends Failed because its flow returned a Failed state: the flow logged the reason in
    one line first (a bad parameter). A flow that raised keeps its traceback: the engine re-raises that exception,
    not FailedRun."""

    def filter(self, record: logging.LogRecord) -> bool:
        from prefect.exceptions import FailedRun

        return not (record.exc_info and isinstance(record.exc_info[1], FailedRun))


def run_logger() -> logging.Logger | logging.LoggerAdapter:
    """Prefect's logger of the current task or flow run (shown in the UI), else a plain one. In a flow run's process
    (a deployment's runs each have their own) it also quiets the engine's traceback of a returned Failed state."""
    from prefect.context import MissingContextError
    from prefect.logging import get_run_logger

    try:
        logger = get_run_logger()
    except MissingContextError:
        return _fallback
    engine = logging.getLogger("prefect.flow_runs")
    if not any(isinstance(f, _NoTracebackOfAFailedState) for f in engine.filters):
        engine.addFilter(_NoTracebackOfAFailedState())
    return logger


def _in_prefect_run() -> bool:
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


class Reporter:
    """report(label, done, total, **metrics): one bar and one Prefect progress artifact per label; a log line at
    every tenth; metrics (if any) logged to the MLflow run at step `done`."""

    def __init__(self, mlflow_run_id: str | None = None, min_interval_s: float = 2.0):
        self.run_id, self.min_interval_s = mlflow_run_id, min_interval_s
        self._bars: dict[str, tqdm] = {}
        self._artifacts: dict[str, object] = {}
        self._last: dict[str, tuple[float, int]] = {}  # label → (time of last UI update, tenth logged)

    def __call__(self, label: str, done: int, total: int, **metrics: float) -> None:
        bar = self._bars.get(label)
        if bar is None:
            bar = self._bars[label] = tqdm(total=total, desc=label, leave=False)
        bar.update(done - bar.n)
        if metrics:
            bar.set_postfix({k: f"{v:.4g}" for k, v in metrics.items()}, refresh=False)
            if self.run_id:
                tracking.log_metrics(self.run_id, metrics, step=done)
        finished = done >= total
        last_time, last_tenth = self._last.get(label, (0.0, -1))
        tenth = 10 * done // max(total, 1)
        if tenth > last_tenth:
            shown = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
            run_logger().info(f"{label}: {done}/{total}" + (f" ({shown})" if shown else ""))
        now = time.monotonic()
        if _in_prefect_run() and (finished or now - last_time >= self.min_interval_s):
            from prefect.artifacts import create_progress_artifact, update_progress_artifact

            pct = 100.0 * done / max(total, 1)
            if label not in self._artifacts:
                self._artifacts[label] = create_progress_artifact(pct, description=label)
            else:
                update_progress_artifact(self._artifacts[label], pct)
            last_time = now
        self._last[label] = (last_time, max(tenth, last_tenth))
        if finished:
            bar.close()
            self._bars.pop(label)
