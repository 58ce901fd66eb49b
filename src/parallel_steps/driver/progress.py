"""Where a run's progress and events go: `logs/job_progress_overview.txt`, `logs/sys/events.jsonl`,
and the callbacks of `run_step` (the CLI's progress bar, the engines' task logs and artifacts).
A broken callback is logged, never allowed to break the run."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..store.logs import RunLogs
from ..summary import RunSummary, timestamp
from .worker_time import WorkerTime

ProgressCallback = Callable[[RunSummary], None]
EventCallback = Callable[[dict[str, Any]], None]

_EVERY_S = 2.0


class Reporter:
    """Reports a run's progress (at most every two seconds, and when forced) and its events (all), and adds up
    where the workers' time went (one per step: over its restarts)."""

    def __init__(
        self,
        logs: RunLogs,
        log: logging.Logger,
        on_progress: ProgressCallback | None = None,
        on_event: EventCallback | None = None,
    ):
        self.logs, self.log = logs, log
        self.on_progress, self.on_event = on_progress, on_event
        self._last = 0.0
        self.worker_time = WorkerTime()

    def due(self) -> bool:
        return time.monotonic() - self._last >= _EVERY_S

    def progress(self, snapshot: RunSummary) -> None:
        self._last = time.monotonic()
        eta = "unknown" if snapshot.eta_s is None else f"{snapshot.eta_s:g} s"
        self.logs.write_progress(
            f"{timestamp()}\n"
            f"{snapshot.mini_batches_total} mini-batches created; {snapshot.mini_batches_done} processed "
            f"({snapshot.mini_batches_succeeded} succeeded, {snapshot.mini_batches_failed} failed, "
            f"{snapshot.mini_batches_reused} reused).\n"
            f"{snapshot.items_succeeded} items succeeded, {snapshot.items_failed} failed; "
            f"{snapshot.attempts_retried} attempts retried.\n"
            f"Rate {snapshot.rate_per_s:g} mini-batches/s; ETA {eta}.\n",
            snapshot,
        )
        if self.on_progress:
            try:
                self.on_progress(snapshot)
            except Exception:
                self.log.exception("on_progress callback failed")

    def emit(self, kind: str, **data: Any) -> None:
        """A job event: into events.jsonl (flushed with the next commit) and to the callback."""
        event = {"type": kind, "time": time.time(), **data}
        self.logs.record_event(event)
        if self.on_event:
            try:
                self.on_event(event)
            except Exception:
                self.log.exception("on_event callback failed for %s", kind)
