"""When a canceled run's loop stops: the cancel came, then a short drain.

Front ends cancel in two ways (the flag set by signals, on_kill or Prefect; a file
written by `parallel-steps cancel`); `termination.Termination` reads both and owns the
timings. The driver asks one question, `check`, once per turn of its loop: no new
mini-batch starts after a cancel, the ones in flight may finish until the drain ends
(half of `termination_grace`; none after a second cancel).
"""

from __future__ import annotations

import logging
import time

from ..control import JobCanceled
from .termination import Termination


class CancelWatch:
    """Watches one run's cancel; `draining` once a cancel came."""

    def __init__(self, termination: Termination, log: logging.Logger):
        self.termination, self.log = termination, log
        self._drain_until: float | None = None  # set by a cancel: in-flight mini-batches may finish until then

    @property
    def draining(self) -> bool:
        """A cancel came: no new mini-batch starts."""
        return self._drain_until is not None

    def check(self, in_flight: bool) -> None:
        """Raise JobCanceled once a cancel came and nothing is `in_flight`, the drain is over, or the
        cancel is urgent; until then only start draining."""
        termination = self.termination
        reason = termination.reason
        if reason is None:
            return
        drain_until = termination.drain_ends() or time.monotonic()
        if self._drain_until is None:
            self._drain_until = drain_until
            left = max(0.0, drain_until - time.monotonic())
            self.log.warning("%s; mini-batches in flight may finish within %g s", reason, round(left, 1))
        if not in_flight or time.monotonic() >= drain_until:
            raise JobCanceled(reason)
