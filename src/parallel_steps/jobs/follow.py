"""Following a run whose driver runs elsewhere (a background process, a Ray job) until it ends: the one
place for how a status is polled, which failures to read it are retried, and cancelling once. What a
front end prints of a run is `report/text.py`.

    front end: RunHooks (progress, warn, launched) -> the CLI's stderr, a task log, a Prefect artifact
        ^
    Follower(run_dir).wait() / wait_async()   each poll: state.run_status (a worker thread when async)
        |   cannot read it now (ParallelStepsError: a Jobs API 502, the network) -> warn, try again;
        |   only a Ray 404 means the job is unknown, and run_status reports that run Failed
        |   stop() gives a reason -> cancel the run, once
        v
    the run's summary once it has ended (`finished`: every count; StepFailed unless it succeeded)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from ..errors import ParallelStepsError, StepFailed
from ..summary import TERMINAL, Counters, RunSummary
from .state import cancel, run_status

POLL_S = 0.5
#: Says why the run must stop (a Ctrl-C, an engine's kill, a cancelled flow run), or None while it may go on.
StopCheck = Callable[[], str | None]


class RunHooks:
    """What a front end does with what a run reports; an engine overrides what it shows (defaults: nothing).

    The same hooks serve a driver in this process (`run_step`'s callbacks) and a run followed elsewhere.
    """

    def progress(self, snapshot: Mapping[str, Any]) -> None:
        """A live progress snapshot (format it with `progress_line`)."""

    def event(self, event: Mapping[str, Any]) -> None:
        """A job event of a driver in this process (a mini-batch failed, a worker replaced, ...)."""

    def warn(self, message: str) -> None:
        """Something the user should see while the run goes on (a status that cannot be read now)."""

    def launched(self, follower: Follower, where: str) -> None:
        """The driver was started elsewhere (or found running there) and is about to be followed;
        `where` says where ("the driver runs as Ray job ..."). An engine may hand the waiting off here."""

    def unreadable(self, error: ParallelStepsError) -> None:
        """The run's status cannot be read now; the follower tries again at the next poll."""
        self.warn(f"cannot read the run's status now ({error}); trying again")


def when_set(flag: threading.Event | None) -> StopCheck | None:
    """A stop check from a cancel flag: its reason (`control.Cancel`) once it is set."""
    if flag is None:
        return None
    return lambda: (getattr(flag, "reason", None) or "canceled by the user") if flag.is_set() else None


def finished(summary: Mapping[str, Any]) -> RunSummary:
    """The summary of a run that has ended, with every count (0 where a driver lost early wrote none).

    Raises:
        StepFailed: the run did not succeed; `.summary` is that summary.
    """
    complete: dict[str, Any] = {**Counters().counts(), **summary}
    if complete["status"] != "Succeeded":
        raise StepFailed(complete)
    return cast(RunSummary, complete)


class Follower:
    """Follows one run by its directory (or run id) until it ends.

    Args:
        run: the run directory, or a run id under `run_root`.
        hooks: where progress and warnings go.
        interval: seconds between two polls.
        retry: try again when the status cannot be read (default); False raises that error.
        read, request_cancel: how the run's state is read and its cancel requested (`state.py`'s).
    """

    def __init__(
        self,
        run: str | Path,
        hooks: RunHooks | None = None,
        *,
        run_root: str | None = None,
        interval: float = POLL_S,
        retry: bool = True,
        read: Callable[[str, str | None], dict[str, Any]] = run_status,
        request_cancel: Callable[[str, str | None, str], object] = cancel,
    ):
        self.run, self.run_root = str(run), run_root
        self.hooks = hooks or RunHooks()
        self.interval, self.retry = interval, retry
        self._read, self._request_cancel = read, request_cancel
        self._shown: Any = None  # the last snapshot passed to hooks.progress (its elapsed_s)
        self._canceled = False

    def poll(self, stop: StopCheck | None = None) -> dict[str, Any] | None:
        """Look once: the run's status (a new progress snapshot goes to the hooks), None when it cannot
        be read now; a reason from `stop` cancels the run (once)."""
        try:
            summary = self._read(self.run, self.run_root)
        except ParallelStepsError as exc:
            if not self.retry:
                raise
            self.hooks.unreadable(exc)
            summary = None
        if summary is not None and summary["status"] in TERMINAL:
            return summary
        if summary is not None and "mini_batches_done" in summary and summary.get("elapsed_s") != self._shown:
            self._shown = summary.get("elapsed_s")
            self.hooks.progress(summary)
        if stop is not None and not self._canceled and (reason := stop()):
            self.cancel(reason)
        return summary

    def wait(self, stop: StopCheck | None = None, timeout: float | None = None) -> dict[str, Any]:
        """Block until the run ends (or `timeout` seconds pass: TimeoutError); returns its summary."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            summary = self.poll(stop)
            if summary is not None and summary["status"] in TERMINAL:
                return summary
            if deadline is not None and time.monotonic() > deadline:
                run, status = (summary["run_id"], summary["status"]) if summary else (self.run, "unknown")
                raise TimeoutError(f"run {run} is still {status} after {timeout:g} s")
            time.sleep(self.interval)

    async def wait_async(self, stop: StopCheck | None = None) -> dict[str, Any]:
        """`wait` for an event loop (Airflow's triggerer, an async flow): each poll, `stop` included,
        runs on a worker thread, so the loop stays free while a run is followed."""
        import asyncio  # here: the CLI's start-up, which never waits in a loop, does not pay for it

        while True:
            summary = await asyncio.to_thread(self.poll, stop)
            if summary is not None and summary["status"] in TERMINAL:
                return summary
            await asyncio.sleep(self.interval)

    def result(self, stop: StopCheck | None = None) -> RunSummary:
        """The summary once the run has ended; StepFailed unless it succeeded (`finished`)."""
        return finished(self.wait(stop))

    async def result_async(self, stop: StopCheck | None = None) -> RunSummary:
        return finished(await self.wait_async(stop))

    def cancel(self, reason: str) -> None:
        """Cancel the run, once however often a front end asks; a run that cannot be canceled (it has
        ended meanwhile, the cluster is out of reach) is a warning, and following goes on."""
        if self._canceled:
            return
        self._canceled = True
        try:
            self._request_cancel(self.run, self.run_root, reason)
        except ParallelStepsError as exc:
            self.hooks.warn(f"the run was not canceled: {exc}")
