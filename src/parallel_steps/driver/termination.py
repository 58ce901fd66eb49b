"""The termination contract: a canceled run (SIGTERM, Airflow's on_kill, a Prefect cancel,
`parallel-steps cancel`) ends within `termination_grace`, whatever phase it is in.

    t0: the cancel      t0 + grace/2            t0 + 3/4 grace           t0 + grace
    no new mini-batch   in-flight ones killed   shutdown() cut off       the run has ended (a process that
    in flight finish    shutdown() may run      summary and report       exists for the run exits if not)

A second cancel is urgent: every deadline is now. The driver's loop drains by `drain_ends`; the
phases of the step (planning, assembling, uploading) call `check` between their units of work;
`guard` kills a pool's workers from a thread when their deadline passes while the step waits on
them (a shutdown() that sleeps); `bounded` waits for the report at most until the deadline. One
owner for the timings, so that the table in docs/reliability.md is this module.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from ..control import Cancel, JobCanceled
from ..pool.base import WorkerPool
from ..store.runs import cancel_requested

T = TypeVar("T")

DRAIN_SHARE = 0.5  # of the grace: mini-batches in flight may finish until then
SHUTDOWN_SHARE = 0.75  # of the grace: workers' shutdown() may run until then; the rest is the summary's
_CHECK_FILE_S = 0.5  # how often the cancel request file is looked for
_GUARD_TICK_S = 0.1


class Termination:
    """When a canceled run must have stopped each phase: from the cancel flag (or the run's cancel
    request file) and `termination_grace`. Safe to read from the guard's thread."""

    def __init__(self, cancel: threading.Event, grace: float, run_dir: Path | None = None):
        self.cancel, self.grace, self.run_dir = cancel, grace, run_dir
        self._since: float | None = None  # monotonic time of the cancel
        self._requested: str | None = None  # the reason of a cancel request file
        self._next_file_check = 0.0

    @property
    def reason(self) -> str | None:
        """Why the run must stop, or None while it may go on."""
        if self.cancel.is_set():
            if self._since is None:
                self._since = time.monotonic()
            return getattr(self.cancel, "reason", Cancel.reason)
        now = time.monotonic()
        if self._requested is None and self.run_dir is not None and now >= self._next_file_check:
            self._next_file_check = now + _CHECK_FILE_S
            self._requested = cancel_requested(self.run_dir)
            if self._requested is not None:
                self._since = now
        return self._requested

    @property
    def urgent(self) -> bool:
        """A second cancel came: stop at once."""
        return bool(getattr(self.cancel, "urgent", False))

    def deadline(self, share: float = 1.0) -> float | None:
        """The monotonic time by which `share` of the grace is used up (now, when urgent); None: no cancel."""
        if self.reason is None or self._since is None:
            return None
        return time.monotonic() if self.urgent else self._since + share * self.grace

    def drain_ends(self) -> float | None:
        """Until when mini-batches in flight may finish."""
        return self.deadline(DRAIN_SHARE)

    def shutdown_grace(self, configured: float) -> float:
        """How long idle workers' shutdown() may take: `configured`, or what is left of its share after a cancel."""
        until = self.deadline(SHUTDOWN_SHARE)
        return configured if until is None else max(0.0, min(configured, until - time.monotonic()))

    def check(self) -> None:
        """Raise JobCanceled once a cancel came: called between the units of work of a phase."""
        if (reason := self.reason) is not None:
            raise JobCanceled(reason)

    @contextlib.contextmanager
    def guard(self, pool: WorkerPool, log: logging.Logger) -> Iterator[None]:
        """While the body waits on the pool's workers (closing them), kill them all once a cancel's
        shutdown share is over, from a thread: a shutdown() that sleeps cannot hold the run."""
        done = threading.Event()

        def watch() -> None:
            told = False  # that the cancel came while the workers stop, and when they are cut off
            while not done.wait(_GUARD_TICK_S):
                until = self.deadline(SHUTDOWN_SHARE)
                if until is not None and not told and not self.urgent:
                    left = max(0.0, until - time.monotonic())
                    log.info(
                        "%s while the workers stop: they are killed in %.1f s unless they are done", self.reason, left
                    )
                    told = True
                if until is not None and time.monotonic() >= until:
                    log.warning("%s: the workers did not stop within the termination grace; killing them", self.reason)
                    pool.kill_workers()
                    return

        thread = threading.Thread(target=watch, name="parallel-steps-termination", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def bounded(self, call: Callable[[], T], what: str, log: logging.Logger) -> T | None:
        """`call()` (in a thread), waited for at most until a cancel's grace is over; None if it was not done.
        For what may be left unfinished (the report), never for what the run's outcome depends on."""
        result: list[T] = []
        failure: list[BaseException] = []

        def target() -> None:
            try:
                result.append(call())
            except BaseException as exc:  # re-raised in the caller's thread
                failure.append(exc)

        thread = threading.Thread(target=target, name=f"parallel-steps-{what}", daemon=True)
        thread.start()
        while thread.is_alive():
            until = self.deadline(SHUTDOWN_SHARE + (1 - SHUTDOWN_SHARE) / 2)
            if until is not None and time.monotonic() >= until:
                log.warning("%s: not written, the run was canceled (%s)", what, self.reason)
                return None
            thread.join(_GUARD_TICK_S)
        if failure:
            raise failure[0]
        return result[0]
