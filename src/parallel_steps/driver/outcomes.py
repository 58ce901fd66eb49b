"""What becomes of each attempt: the ledger row, the line of processed_mini-batches.csv, the counters, the
error groups and the retry decision; written in batches (a commit every tenth of a second)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..errors import error_line
from ..inputs.minibatch import MiniBatch
from ..protocol import LossReason, Outcome, WorkerInfo
from ..store.ledger import Ledger
from ..store.logs import RunLogs
from ..summary import RESUMED_COUNTS, Counters
from .faults import ErrorGroups, RetryPolicy
from .health import JobHealth
from .progress import Reporter

_COMMIT_EVERY_S = 0.1  # a killed driver loses the results of the last moment; they run again on resume


@dataclass(eq=False)  # queues find and remove attempts by identity, not by comparing every field
class Attempt:
    """One attempt of a mini-batch, from the moment it is handed to a worker."""

    mini_batch: MiniBatch
    attempt: int
    started: float
    items: int | None


class Outcomes:
    """Records attempts' outcomes; the only writer of the ledger while the driver runs."""

    def __init__(
        self,
        ledger: Ledger,
        counters: Counters,
        policy: RetryPolicy,
        errors: ErrorGroups,
        health: JobHealth,
        report: Reporter,
    ):
        self.ledger, self.counters, self.policy, self.errors = ledger, counters, policy, errors
        self.health, self.report = health, report
        self.logs: RunLogs = report.logs
        self.log: logging.Logger = report.log
        self._dirty = False
        self._last_commit = 0.0

    @property
    def dirty(self) -> bool:
        """Results are waiting for the next commit."""
        return self._dirty

    def succeeded(self, worker: WorkerInfo, current: Attempt, items: int | None, outcome: Outcome) -> None:
        mb, returned = current.mini_batch, outcome.returned
        items = items if items is not None else returned
        no_result = max(0, items - returned)
        failed = min(items, no_result + outcome.row_errors)  # no result, or an error row
        self.counters.add_succeeded(items, failed, without_result=no_result)
        self.health.completed()
        self.ledger.succeed(
            mb.index,
            current.attempt,
            outcome.part,
            returned,
            failed,
            items,
            worker.id,
            outcome.duration,
            outcome.fingerprint,
            outcome.checks,
            outcome.error,
        )
        self._record(worker, current, items, items - failed, failed, "succeeded", outcome.duration)
        if outcome.row_errors:
            self.counters.items_with_errors += outcome.row_errors
            self.log.warning("mini-batch %d: %s; counted as failed items", mb.index, outcome.error)
            self.health.check_thresholds()
        elif failed and self.counters.no_result_fails:
            self.log.warning(
                "mini-batch %d returned %d of %d items; %d counted as failed", mb.index, returned, items, failed
            )
            self.health.check_thresholds()

    def failed(
        self,
        worker: WorkerInfo,
        current: Attempt,
        items: int | None,
        outcome: str,
        error: str | None,
        exit_code: int | None,
        duration: float,
        loss: LossReason | None = None,
    ) -> bool:
        """Record a failed attempt; returns whether the mini-batch runs again (its next attempt)."""
        mb, error = current.mini_batch, error or "unknown error"
        line = error_line(error)
        self.ledger.record_attempt(
            mb.index, current.attempt, worker.id, worker.pid, current.started, outcome, line, exit_code
        )
        self._record(worker, current, items, 0, items, outcome, duration, line)
        self.errors.add(error, mb.index, worker)
        if self.policy.should_retry(current.attempt, error, exit_code, loss):
            self.counters.attempts_retried += 1
            self.log.warning(
                "mini-batch %d attempt %d %s on %s: %s; retrying",
                mb.index,
                current.attempt,
                outcome.replace("_", " "),
                worker.id,
                line,
            )
            return True
        self.counters.add_failed(items or 0)
        self.health.completed()
        self.ledger.fail(mb.index, current.attempt, line, exit_code, items, worker.id, duration)
        self.log.error("mini-batch %d failed after %d attempt(s) (%s): %s", mb.index, current.attempt, outcome, line)
        self.report.emit("mini_batch_failed", mini_batch=mb.index, attempts=current.attempt, error=line)
        self.health.check_thresholds()
        return False

    def commit(self, force: bool = True) -> None:
        """Commit what was recorded, at most every tenth of a second unless `force`."""
        now = time.monotonic()
        if self._dirty and (force or now - self._last_commit >= _COMMIT_EVERY_S):
            self.ledger.set(**{name: getattr(self.counters, name) for name in RESUMED_COUNTS})
            self.ledger.commit()
            self.logs.flush()
            self._dirty = False
            self._last_commit = now

    def _record(
        self,
        worker: WorkerInfo,
        current: Attempt,
        items: int | None,
        succeeded: int | None,
        failed: int | None,
        outcome: str,
        duration: float,
        error: str = "",
    ) -> None:
        self.logs.record_attempt(
            current.mini_batch.index,
            current.attempt,
            worker,
            items,
            succeeded,
            failed,
            outcome,
            current.started,
            duration,
            error,
        )
        self._dirty = True
