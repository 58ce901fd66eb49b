"""What an Airflow task log shows of a run, for the operator (a driver in the task, or a Ray job it
waits for) and the trigger (a Ray job it follows in the triggerer): progress lines at most one per
interval, failed mini-batches and replaced workers (bounded), restarts, the job's end, warnings.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..jobs import RunHooks
from ..report.text import Throttle, progress_line

_MAX_EVENT_LINES = 20
Log = logging.Logger | logging.LoggerAdapter[Any]


class TaskLog(RunHooks):
    """The run's progress, events and warnings as task log lines.

    Args:
        log: the operator's or the trigger's logger.
        interval: seconds between two progress lines (the first and the last are always written).
    """

    def __init__(self, log: Log, interval: float):
        self.log, self.lines = log, 0
        self._throttle = Throttle(interval)

    def progress(self, snapshot: Mapping[str, Any]) -> None:
        if self._throttle.due(snapshot):
            self.log.info("progress: %s", progress_line(snapshot))

    def warn(self, message: str) -> None:
        self.log.warning("%s", message)

    def event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind in ("threshold_exceeded", "job_canceled"):
            self.log.error("%s: %s", kind.replace("_", " "), event.get("reason"))
            return
        if kind == "restart":
            self.log.warning("step restarted (%s) after a system error: %s", event.get("restart"), event.get("reason"))
            return
        if kind not in ("mini_batch_failed", "worker_replaced"):
            return
        self.lines += 1
        if self.lines > _MAX_EVENT_LINES:
            if self.lines == _MAX_EVENT_LINES + 1:
                self.log.warning("further failures are only in the run's logs (logs/user/error.txt)")
            return
        if kind == "mini_batch_failed":
            self.log.warning(
                "mini-batch %s failed after %s attempt(s): %s",
                event.get("mini_batch"),
                event.get("attempts"),
                event.get("error"),
            )
        else:
            self.log.warning(
                "worker %s replaced: %s %s", event.get("worker"), event.get("reason"), event.get("detail") or ""
            )
