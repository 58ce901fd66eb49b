"""When a canceled run stops: the cancel flag or a cancel request file, then a short drain.

Front ends cancel in two ways (the flag set by signals, on_kill or Prefect; a file
written by `parallel-steps cancel`); the driver asks one question, `check`, once per
turn of its loop. Apart from the driver so the drain (no new mini-batch starts, the
ones in flight get CANCEL_GRACE_S, none after a second cancel) has one owner.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from ..control import Cancel, JobCanceled
from ..store.runs import cancel_requested

CANCEL_GRACE_S = 10.0  # how long mini-batches in flight may finish after a cancel before workers are killed
_CHECK_EVERY_S = 0.5  # how often the cancel request file is looked for


class CancelWatch:
    """Watches one run's cancel flag and cancel request file; `draining` once a cancel came."""

    def __init__(self, cancel: threading.Event, run_dir: Path | None, log: logging.Logger):
        self.cancel, self.run_dir, self.log = cancel, run_dir, log
        self._next_check = 0.0
        self._requested: str | None = None  # the reason of a cancel request file
        self._drain_until: float | None = None  # set by a cancel: in-flight mini-batches may finish until then

    @property
    def draining(self) -> bool:
        """A cancel came: no new mini-batch starts."""
        return self._drain_until is not None

    def check(self, in_flight: bool) -> None:
        """Raise JobCanceled once a cancel came and nothing is `in_flight`, the drain is over, or the
        cancel is urgent; until then only start draining."""
        reason = self._reason()
        if reason is None:
            return
        now = time.monotonic()
        if self._drain_until is None:
            self._drain_until = now + CANCEL_GRACE_S
            self.log.warning("%s; mini-batches in flight may finish within %g s", reason, CANCEL_GRACE_S)
        if not in_flight or now >= self._drain_until or getattr(self.cancel, "urgent", False):
            raise JobCanceled(reason)

    def _reason(self) -> str | None:
        if self.cancel.is_set():
            return getattr(self.cancel, "reason", Cancel.reason)
        now = time.monotonic()
        if self._requested is None and self.run_dir is not None and now >= self._next_check:
            self._next_check = now + _CHECK_EVERY_S
            self._requested = cancel_requested(self.run_dir)
        return self._requested
