"""Stopping a run: the cancel flag every front end sets, the exceptions that end a driver's loop, and
the exit of a process that exists for one run when its run will not stop.

A leaf module, so the CLI, the engines' adapters and the driver share these without
importing each other. A cancel request from another process is a file in the run
directory (store/runs.py); it ends up the same way.
"""

from __future__ import annotations

import os
import sys
import threading

URGENT_EXIT_S = 2.0  # after a second cancel, how long a process that exists for the run waits before it exits


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


def exit_when_overdue(cancel: Cancel, grace: float) -> None:
    """For a process that exists for one run (the CLI, a detached driver), called by its signal handler
    after each cancel: exit when the run has not ended `grace` after the first cancel (URGENT_EXIT_S
    after a second). Its workers follow their driver; the ledger keeps what it committed."""
    wait = URGENT_EXIT_S if cancel.urgent else grace
    message = (
        f"parallel-steps: the run did not stop within {wait:g} s of the {'second ' if cancel.urgent else ''}cancel; "
        "exiting now (rerun the step in the same run directory to resume it)"
    )

    def leave() -> None:
        print(message, file=sys.stderr, flush=True)
        os._exit(1)

    timer = threading.Timer(wait, leave)
    timer.daemon = True
    timer.start()
