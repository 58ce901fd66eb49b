"""Stopping a run: the cancel flag every front end sets, and the exceptions that end a driver's loop.

A leaf module, so the CLI, the engines' adapters and the driver share these without
importing each other. A cancel request from another process is a file in the run
directory (store/runs.py); it ends up the same way.
"""

from __future__ import annotations

import threading


class Cancel(threading.Event):
    """A cancel flag with a reason; `run_step(cancel=...)` also takes a plain `threading.Event`.

    The first `cancel()` stops the run gracefully: no new mini-batches start, the ones in
    flight get a short grace, idle workers run shutdown(). A second `cancel()` (a second
    Ctrl-C or SIGTERM) makes it `urgent`: every worker is killed at once.
    """

    reason = "canceled by the user"
    urgent = False

    def cancel(self, reason: str | None = None) -> None:
        if self.is_set():
            self.urgent = True
        elif reason:
            self.reason = reason
        self.set()


class JobStopped(Exception):
    """The job must stop before every mini-batch has an outcome; the message is the status reason."""

    status = "Failed"


class JobFailed(JobStopped):
    """A threshold, a health check or the init() policy failed the job."""


class JobCanceled(JobStopped):
    """Someone canceled the job (a signal, `parallel-steps cancel`, an engine's kill)."""

    status = "Canceled"
