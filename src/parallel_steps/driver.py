"""The driver (the main role): hands out mini-batches, retries, applies thresholds, commits results.

It takes pending mini-batches in plan order (as the plan streams in, or from
the ledger on a resume), keeps each worker's short queue filled, and turns pool
events into ledger rows, log lines and counters. It knows
neither processes nor Ray: everything it does goes through a `WorkerPool`.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import ParallelRunConfig
from .faults import RetryPolicy, error_line, signature
from .inputs.minibatch import MiniBatch
from .pool.base import Event, Finished, HangTimeoutChanged, InitFailed, ItemsLoaded, Lost, Ready, WorkerInfo, WorkerPool
from .store.ledger import Ledger
from .store.logs import RunLogs, timestamp
from .store.runs import cancel_requested

if TYPE_CHECKING:
    from .worker.runtime import Outcome

_TICK_S = 0.5  # the longest the loop waits without looking at the clock and the cancel flag
_PROGRESS_EVERY_S = 2.0
_COMMIT_EVERY_S = 0.1  # a killed driver loses the results of the last moment; they run again on resume
_INIT_FAILURE_GRACE_S = 120.0
_MIN_FINISHED_FOR_RATE = 10

ProgressCallback = Callable[[dict[str, Any]], None]
EventCallback = Callable[[dict[str, Any]], None]


class Cancel(threading.Event):
    """A cancel flag with a reason; `run_step(cancel=...)` also takes a plain `threading.Event`."""

    reason = "canceled by the user"

    def cancel(self, reason: str | None = None) -> None:
        if reason:
            self.reason = reason
        self.set()


class JobFailed(Exception):
    """The job must stop; the message is the status reason."""

    def __init__(self, reason: str, status: str = "Failed"):
        super().__init__(reason)
        self.status = status


@dataclass
class Counters:
    mini_batches_total: int = 0
    mini_batches_succeeded: int = 0
    mini_batches_failed: int = 0
    mini_batches_reused: int = 0
    items_total: int = 0
    items_succeeded: int = 0
    items_failed: int = 0
    attempts_retried: int = 0
    workers_started: int = 0
    init_failures: int = 0
    planning: bool = False  # the plan is still being written: mini_batches_total will grow

    @property
    def done(self) -> int:
        return self.mini_batches_succeeded + self.mini_batches_failed


@dataclass(eq=False)  # queues find and remove attempts by identity, not by comparing every field
class _Attempt:
    mini_batch: MiniBatch
    attempt: int
    started: float
    items: int | None


@dataclass
class _ErrorGroup:
    count: int = 0  # failed attempts
    first: str = ""
    examples: list[str] = field(default_factory=list)
    mini_batches: set[int] = field(default_factory=set)  # distinct mini-batches it failed


def threshold_breach(config: ParallelRunConfig, counters: Counters) -> str | None:
    """Which threshold these counts exceed, if any (`error_threshold`, `mini_batch_error_threshold`,
    `allowed_failed_percent`, `max_tolerated_failure_rate`)."""
    if 0 <= config.error_threshold < counters.items_failed:
        return f"error_threshold {config.error_threshold} exceeded: {counters.items_failed} items failed"
    if 0 <= config.mini_batch_error_threshold < counters.mini_batches_failed:
        return (
            f"mini_batch_error_threshold {config.mini_batch_error_threshold} exceeded: "
            f"{counters.mini_batches_failed} mini-batches failed"
        )
    total = max(1, counters.mini_batches_total)
    if not counters.planning and 100.0 * counters.mini_batches_failed / total > config.allowed_failed_percent:
        return (
            f"allowed_failed_percent {config.allowed_failed_percent:g} exceeded: "
            f"{counters.mini_batches_failed} of {counters.mini_batches_total} mini-batches failed"
        )
    finished = counters.done - counters.mini_batches_reused
    if (
        config.max_tolerated_failure_rate >= 0
        and finished >= _MIN_FINISHED_FOR_RATE
        and counters.mini_batches_failed / finished > config.max_tolerated_failure_rate
    ):
        return (
            f"max_tolerated_failure_rate {config.max_tolerated_failure_rate:g} exceeded: "
            f"{counters.mini_batches_failed} of {finished} finished mini-batches failed"
        )
    return None


class Driver:
    """Runs the pending mini-batches of one run to an outcome."""

    def __init__(
        self,
        config: ParallelRunConfig,
        ledger: Ledger,
        pending: Iterator[MiniBatch],
        logs: RunLogs,
        logger: logging.Logger,
        pool: WorkerPool,
        counters: Counters,
        on_progress: ProgressCallback | None = None,
        on_event: EventCallback | None = None,
        cancel: threading.Event | None = None,
        run_dir: Path | None = None,
    ):
        self.config = config
        self.ledger = ledger
        self.logs = logs
        self.log = logger
        self.pool = pool
        self.counters = counters
        self.on_progress = on_progress
        self.on_event = on_event
        self.cancel = cancel or threading.Event()
        self.run_dir = run_dir
        self._next_cancel_check = 0.0
        self.policy = RetryPolicy(
            config.fault_tolerant_policy, config.run_max_try, config.retryable_errors, config.retryable_exit_codes
        )
        self.errors: dict[str, _ErrorGroup] = {}
        self._pending = pending  # in plan order, each already in the ledger
        self._pending_done = False
        self._lookahead: MiniBatch | None = None
        self._retry: collections.deque[tuple[MiniBatch, int]] = collections.deque()
        self._ready: dict[str, WorkerInfo] = {}
        self._queued: dict[str, collections.deque[_Attempt]] = {}  # per ready worker, in run order
        self._log_duration: float | None = None  # moving average of log(duration): a worker descheduled
        # for a few ms in one mini-batch barely moves it
        self._starting: dict[str, float] = {}  # "<node>/<slot>" -> when its worker was started
        self._init_failures_by_node: collections.Counter[int] = collections.Counter()
        self._stopped_nodes: set[int] = set()
        self._init_errors: list[str] = []
        self._started = time.monotonic()
        self._first_dispatch: float | None = None
        self._last_completion = time.monotonic()
        self._exempt: dict[str, float] = {}  # worker id -> until when its mini-batch may run without progress
        self._last_progress = 0.0
        self._dirty = False
        self._last_commit = 0.0

    # The loop ---------------------------------------------------------------------------

    def run(self) -> tuple[str, str]:
        """Run until every mini-batch has an outcome; returns (status, status_reason)."""
        self.emit("job_started", mini_batches=None if self.counters.planning else self.counters.mini_batches_total)
        try:
            self._check_thresholds()  # items that failed in reused mini-batches count too
            self._expect_workers()
            while self._has_work():
                self._check_canceled()
                self._dispatch()
                for event in self.pool.next_events(_COMMIT_EVERY_S if self._dirty else _TICK_S):
                    self._handle(event)
                self._commit(force=False)
                self._check_job_health()
                self._report_progress()
            status, reason = self._final_status()
        except JobFailed as stop:
            status, reason = stop.status, str(stop)
            self.emit("threshold_exceeded" if status == "Failed" else "job_canceled", reason=reason)
        self._commit()
        self._report_progress(force=True)
        self.emit("job_finished", status=status, reason=reason)
        return status, reason

    def _check_canceled(self) -> None:
        """The cancel flag (signals, on_kill, Prefect), or a cancel request file (`parallel-steps cancel`)."""
        if self.cancel.is_set():
            raise JobFailed(getattr(self.cancel, "reason", Cancel.reason), "Canceled")
        now = time.monotonic()
        if self.run_dir is not None and now >= self._next_cancel_check:
            self._next_cancel_check = now + _TICK_S
            reason = cancel_requested(self.run_dir)
            if reason:
                raise JobFailed(reason, "Canceled")

    def _expect_workers(self) -> None:
        settings = self.pool.settings
        for node in range(settings.node_count):
            for slot in range(settings.process_count_per_node):
                self._starting[f"{node}/{slot}"] = time.monotonic()
        self.counters.workers_started += len(self._starting)

    def _has_work(self) -> bool:
        if self._retry or any(self._queued.values()):
            return True
        if self._pending_done:
            return False
        return self._peek_pending()

    def _peek_pending(self) -> bool:
        if self._lookahead is None and not self._pending_done:
            self._lookahead = next(self._pending, None)
            self._pending_done = self._lookahead is None
            if self._pending_done:
                self._check_thresholds()  # the plan is complete: allowed_failed_percent can be judged
        return self._lookahead is not None

    def _next_mini_batch(self) -> tuple[MiniBatch, int] | None:
        if self._retry:
            return self._retry.popleft()
        if self._peek_pending():
            mini_batch, self._lookahead = self._lookahead, None
            return mini_batch, 1
        return None

    def _queue_depth(self) -> int:
        """Mini-batches a worker holds: one while they are long (so a slow worker never holds back
        the rest), about 50 ms of work when they are short (at most 1024), so that a worker never
        runs dry while the driver commits (up to tens of milliseconds when SQLite checkpoints)."""
        if self._log_duration is None:
            return 2
        typical = math.exp(self._log_duration)
        if typical >= 0.05:
            return 1
        return max(2, min(1024, int(0.05 / typical) + 1))

    def _dispatch(self) -> None:
        depth = self._queue_depth()
        lowest = min(map(len, self._queued.values()), default=depth)
        for level in range(lowest, depth):  # breadth first: every worker gets one before any gets two
            for worker_id, queued in self._queued.items():
                if len(queued) > level:
                    continue
                work = self._next_mini_batch()
                if work is None:
                    return
                mini_batch, attempt = work
                queued.append(_Attempt(mini_batch, attempt, time.time(), mini_batch.items))
                self.pool.submit(self._ready[worker_id], mini_batch, attempt, self.config.run_invocation_timeout)
                if self._first_dispatch is None:
                    self._first_dispatch = time.monotonic()

    # Events -----------------------------------------------------------------------------------

    def _handle(self, event: Event) -> None:
        if isinstance(event, Ready):
            since = self._starting.get(f"{event.worker.node_index}/{event.worker.slot}", time.monotonic())
            self._forget_starting(event.worker)
            self._ready[event.worker.id] = event.worker
            self._queued[event.worker.id] = collections.deque()
            self.emit(  # starting_s: since the driver started or replaced it (a timeline's start-up bar)
                "worker_started",
                worker=event.worker.id,
                pid=event.worker.pid,
                gpu=event.worker.gpu,
                starting_s=round(time.monotonic() - since, 3),
            )
            self.log.info(
                "%s ready (pid %s%s)",
                event.worker.id,
                event.worker.pid,
                f", CUDA_VISIBLE_DEVICES={event.worker.gpu}" if event.worker.gpu is not None else "",
            )
        elif isinstance(event, Finished):
            self._finished(event)
        elif isinstance(event, Lost):
            self._lost(event)
        elif isinstance(event, InitFailed):
            self._init_failed(event)
        elif isinstance(event, ItemsLoaded):
            for attempt in self._queued.get(event.worker.id, ()):
                if attempt.mini_batch.index == event.mini_batch:
                    attempt.items = event.items
        elif isinstance(event, HangTimeoutChanged):
            limit = "no limit" if event.seconds is None else f"{event.seconds:g} s"
            self.log.info("%s set the run() timeout of its current mini-batch to %s", event.worker.id, limit)
            # The job-level no-progress check gives that mini-batch the same room.
            self._exempt[event.worker.id] = (
                float("inf") if event.seconds is None else time.monotonic() + event.seconds + 30
            )

    def _finished(self, event: Finished) -> None:
        self._exempt.pop(event.worker.id, None)
        queued = self._queued[event.worker.id]
        current = next(a for a in queued if a.mini_batch.index == event.mini_batch.index)
        queued.remove(current)
        outcome = event.outcome
        items = outcome.items if outcome.items is not None else current.items
        current.started, duration = outcome.started, outcome.duration
        sample = math.log(max(duration, 1e-6))
        self._log_duration = sample if self._log_duration is None else 0.9 * self._log_duration + 0.1 * sample
        if outcome.ok:
            self._succeeded(event.worker, current, items, outcome, duration)
        else:
            self._attempt_failed(event.worker, current, items, "failed", outcome.error, None, duration)

    def _lost(self, event: Lost) -> None:
        self._exempt.pop(event.worker.id, None)
        queued = self._queued.pop(event.worker.id, collections.deque())
        self._ready.pop(event.worker.id, None)
        current = None
        if event.mini_batch is not None:
            current = next(a for a in queued if a.mini_batch.index == event.mini_batch.index)
            queued.remove(current)
        for unstarted in reversed(queued):  # not started, or finished but unreported: again, no attempt counted
            self._retry.appendleft((unstarted.mini_batch, unstarted.attempt))
        self._forget_starting(event.worker)
        self._replace(event.worker, event.reason, event.detail)
        self.log.warning("%s lost (%s): %s; starting a replacement", event.worker.id, event.reason, event.detail)
        if current is not None:
            outcome = "out_of_memory" if event.reason == "out_of_memory" else event.reason
            self._attempt_failed(
                event.worker,
                current,
                current.items,
                outcome,
                event.detail,
                event.exit_code,
                time.time() - current.started,
            )

    def _succeeded(
        self, worker: WorkerInfo, current: _Attempt, items: int | None, outcome: Outcome, duration: float
    ) -> None:
        mb, counters, returned = current.mini_batch, self.counters, outcome.returned
        items = items if items is not None else returned
        failed = max(0, items - returned)
        counters.mini_batches_succeeded += 1
        counters.items_total += items
        counters.items_succeeded += items - failed
        counters.items_failed += failed
        self._last_completion = time.monotonic()
        self.ledger.succeed(
            mb.index, current.attempt, outcome.part, returned, failed, items, worker.id, duration, outcome.fingerprint
        )
        self._record(worker, current, items, items - failed, failed, "succeeded", duration)
        if failed:
            self.log.warning(
                "mini-batch %d returned %d of %d items; %d counted as failed", mb.index, returned, items, failed
            )
            self._check_thresholds()

    def _attempt_failed(
        self,
        worker: WorkerInfo,
        current: _Attempt,
        items: int | None,
        outcome: str,
        error: str | None,
        exit_code: int | None,
        duration: float,
    ) -> None:
        mb = current.mini_batch
        error = error or "unknown error"
        self.ledger.record_attempt(
            mb.index, current.attempt, worker.id, worker.pid, current.started, outcome, error_line(error), exit_code
        )
        self._record(worker, current, items, 0, items, outcome, duration, error_line(error))
        self._group_error(error, mb, worker)
        if self.policy.should_retry(current.attempt, error, exit_code):
            self.counters.attempts_retried += 1
            self._retry.append((mb, current.attempt + 1))
            self.log.warning(
                "mini-batch %d attempt %d %s on %s: %s; retrying",
                mb.index,
                current.attempt,
                outcome.replace("_", " "),
                worker.id,
                error_line(error),
            )
            return
        counters = self.counters
        counters.mini_batches_failed += 1
        counters.items_total += items or 0
        counters.items_failed += items or 0
        self._last_completion = time.monotonic()
        self.ledger.fail(mb.index, current.attempt, error_line(error), exit_code, items, worker.id, duration)
        self.log.error(
            "mini-batch %d failed after %d attempt(s) (%s): %s", mb.index, current.attempt, outcome, error_line(error)
        )
        self.emit("mini_batch_failed", mini_batch=mb.index, attempts=current.attempt, error=error_line(error))
        self._check_thresholds()

    def _init_failed(self, event: InitFailed) -> None:
        """ParallelRunStep's init() policy: stop a node after 3 x process_count_per_node failures."""
        worker, settings = event.worker, self.pool.settings
        self._forget_starting(worker)
        self.counters.init_failures += 1
        self._init_failures_by_node[worker.node_index] += 1
        self._init_errors.append(event.error)
        self.log.error("%s init() failed: %s", worker.id, error_line(event.error))
        self._group_error(event.error, None, worker)
        if self._init_failures_by_node[worker.node_index] >= 3 * settings.process_count_per_node:
            if worker.node_index not in self._stopped_nodes:
                self._stopped_nodes.add(worker.node_index)
                self.log.error(
                    "node %s: init() failed %d times; no more workers start there",
                    worker.node_id,
                    self._init_failures_by_node[worker.node_index],
                )
        else:
            self._replace(worker, "init_failed", error_line(event.error))
        self._check_init_policy()

    def _replace(self, worker: WorkerInfo, reason: str, detail: str) -> None:
        self._starting[f"{worker.node_index}/{worker.slot}"] = time.monotonic()
        self.counters.workers_started += 1
        self.pool.replace(worker)
        self.emit("worker_replaced", worker=worker.id, reason=reason, detail=detail)

    def _forget_starting(self, worker: WorkerInfo) -> None:
        self._starting.pop(f"{worker.node_index}/{worker.slot}", None)

    # Bookkeeping --------------------------------------------------------------------------------

    def _record(
        self,
        worker: WorkerInfo,
        current: _Attempt,
        items: int | None,
        succeeded: int | None,
        failed: int | None,
        outcome: str,
        duration: float,
        error: str = "",
    ) -> None:
        self.logs.record_attempt(
            [
                current.mini_batch.index,
                current.attempt,
                worker.node_id,
                worker.process_name,
                worker.pid,
                items,
                succeeded,
                failed,
                outcome,
                timestamp(current.started),
                f"{duration:.3f}",
                error,
                f"{current.started:.3f}",
            ]
        )
        self._dirty = True

    def _group_error(self, error: str, mb: MiniBatch | None, worker: WorkerInfo) -> None:
        group = self.errors.setdefault(signature(error), _ErrorGroup(first=error_line(error)))
        group.count += 1
        if len(group.examples) < 3:
            where = f"mini-batch {mb.index}" if mb is not None else "init()"
            group.examples.append(
                f"{where} on {worker.id} (logs/user/error/{worker.node_id}/{worker.process_name}.txt)"
            )
        if mb is None:
            return
        group.mini_batches.add(mb.index)
        if 0 < self.config.max_same_error <= len(group.mini_batches):
            raise JobFailed(
                f"max_same_error {self.config.max_same_error} reached: the same error failed "
                f"{len(group.mini_batches)} mini-batches: {group.first} (first in {group.examples[0]})"
            )

    def _commit(self, force: bool = True) -> None:
        now = time.monotonic()
        if self._dirty and (force or now - self._last_commit >= _COMMIT_EVERY_S):
            self.ledger.commit()
            self.logs.flush()
            self._dirty = False
            self._last_commit = now

    # Job-level checks ----------------------------------------------------------------------------

    def _check_thresholds(self) -> None:
        reason = threshold_breach(self.config, self.counters)
        if reason:
            raise JobFailed(f"{reason}. {self._first_errors()}".strip())

    def _check_init_policy(self) -> None:
        settings = self.pool.settings
        alive = len(self._ready) + len(self._starting)
        if len(self._stopped_nodes) == settings.node_count and alive == 0:
            raise JobFailed(
                f"init() failed {self.counters.init_failures} times on every node; no worker could start. "
                f"Last error: {error_line(self._init_errors[-1])}"
            )
        elapsed = time.monotonic() - self._started
        if (
            elapsed >= _INIT_FAILURE_GRACE_S
            and self.counters.init_failures >= 2 * settings.node_count * settings.process_count_per_node
        ):
            raise JobFailed(
                f"init() failed {self.counters.init_failures} times in {elapsed:.0f} s. "
                f"Last error: {error_line(self._init_errors[-1])}"
            )

    def _check_job_health(self) -> None:
        """Init policy, no-progress and first-task timeouts."""
        config, now = self.config, time.monotonic()
        if self.counters.init_failures:
            self._check_init_policy()
        if self._starting and not self._ready:
            stuck = max(self._starting.values())
            bound = 3 * config.run_invocation_timeout + 30
            if now - stuck > bound:
                raise JobFailed(
                    f"every worker has been in init() for more than {bound:g} s "
                    f"(3 x run_invocation_timeout + 30 s); no progress"
                )
        if self._first_dispatch is None and now - self._started > config.first_task_creation_timeout:
            raise JobFailed(
                f"no mini-batch was handed to a worker within first_task_creation_timeout "
                f"{config.first_task_creation_timeout:g} s"
            )
        exempt = any(until > now for until in self._exempt.values())
        if config.hang_detection and not exempt and now - self._last_completion > config.progress_timeout:
            raise JobFailed(
                f"no mini-batch completed for {config.progress_timeout:g} s (progress_update_timeout); "
                f"the job looks hung. Stacks of hung workers are in logs/user/error/"
            )

    def _first_errors(self, limit: int = 3) -> str:
        groups = sorted(self.errors.values(), key=lambda g: -g.count)[:limit]
        if not groups:
            return ""
        return "First errors: " + "; ".join(f"{g.first} (x{g.count}, {g.examples[0]})" for g in groups)

    def _final_status(self) -> tuple[str, str]:
        counters = self.counters
        if counters.mini_batches_failed or counters.items_failed:
            return "Succeeded", (
                f"{counters.items_failed} items in {counters.mini_batches_failed} failed mini-batches "
                f"were within the thresholds. {self._first_errors()}"
            ).strip()
        return "Succeeded", "every mini-batch succeeded"

    # Progress ------------------------------------------------------------------------------------

    def progress(self) -> dict[str, Any]:
        counters, elapsed = self.counters, time.monotonic() - self._started
        ran = counters.done - counters.mini_batches_reused
        remaining = counters.mini_batches_total - counters.done
        rate = ran / elapsed if elapsed > 0 else 0.0
        return dict(
            mini_batches_total=counters.mini_batches_total,
            mini_batches_done=counters.done,
            mini_batches_succeeded=counters.mini_batches_succeeded,
            mini_batches_failed=counters.mini_batches_failed,
            mini_batches_reused=counters.mini_batches_reused,
            items_succeeded=counters.items_succeeded,
            items_failed=counters.items_failed,
            attempts_retried=counters.attempts_retried,
            elapsed_s=round(elapsed, 3),
            rate_per_s=round(rate, 3),
            eta_s=round(remaining / rate, 1) if rate > 0 and not counters.planning else None,
            workers_busy=sum(1 for q in self._queued.values() if q),
            workers_idle=sum(1 for q in self._queued.values() if not q),
        )

    def _report_progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_progress < _PROGRESS_EVERY_S:
            return
        self._last_progress = now
        snapshot = self.progress()
        eta = "unknown" if snapshot["eta_s"] is None else f"{snapshot['eta_s']:g} s"
        self.logs.write_progress(
            f"{timestamp()}\n"
            f"{snapshot['mini_batches_total']} mini-batches created; {snapshot['mini_batches_done']} processed "
            f"({snapshot['mini_batches_succeeded']} succeeded, {snapshot['mini_batches_failed']} failed, "
            f"{snapshot['mini_batches_reused']} reused).\n"
            f"{snapshot['items_succeeded']} items succeeded, {snapshot['items_failed']} failed; "
            f"{snapshot['attempts_retried']} attempts retried.\n"
            f"Rate {snapshot['rate_per_s']:g} mini-batches/s; ETA {eta}.\n"
        )
        if self.on_progress:
            try:
                self.on_progress(snapshot)
            except Exception:  # a broken callback must not break the run
                self.log.exception("on_progress callback failed")

    def emit(self, kind: str, **data: Any) -> None:
        event = {"type": kind, "time": time.time(), **data}
        self.logs.record_event(event)
        if self.on_event:
            try:
                self.on_event(event)
            except Exception:  # a broken callback must not break the run
                self.log.exception("on_event callback failed for %s", kind)

    def error_summary(self) -> str:
        if not self.errors:
            return "No errors.\n"
        lines = [f"{len(self.errors)} distinct error(s):", ""]
        for group in sorted(self.errors.values(), key=lambda g: -g.count):
            lines.append(f"[{group.count}x] {group.first}")
            lines += [f"    {example}" for example in group.examples]
        return "\n".join(lines) + "\n"
