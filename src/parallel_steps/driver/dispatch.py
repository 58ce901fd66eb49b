"""The driver (the main role): hands out mini-batches, turns pool events into outcomes, commits results.

It takes pending mini-batches in plan order (those already in the ledger, then, for a
fresh run whose plan is written while it runs, each next chunk it asks the plan to write)
and keeps each ready worker's short queue filled. What it
decides is delegated: recording outcomes (the ledger, the attempt log, the
counters) to `outcomes`, retries and error groups to `faults`, when the job must
stop to `health` (after a cancel, to `cancel`), progress and events to `progress`.
It knows neither processes nor Ray: everything it does to workers goes through a
`WorkerPool`.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator

from ..config.sections import DriverPolicy
from ..control import JobStopped
from ..errors import error_line
from ..inputs.minibatch import MiniBatch
from ..pool.base import WorkerPool
from ..protocol import (
    Event,
    Finished,
    HangTimeoutChanged,
    InitFailed,
    ItemsLoaded,
    LossReason,
    Lost,
    Ready,
    WorkerInfo,
)
from ..store.ledger import Ledger
from ..store.space import refused_write
from ..summary import Counters, RunStatus, RunSummary, snapshot
from .cancel import CancelWatch
from .depth import QueueDepth
from .faults import ErrorGroups, RetryPolicy
from .health import JobHealth
from .outcomes import Attempt, Outcomes
from .progress import Reporter
from .termination import Termination

_TICK_S = 0.5  # the longest the loop waits without looking at the clock and the cancel flag
_COMMIT_WAIT_S = 0.1  # the longest the loop waits holding uncommitted results
_RUN = 32  # consecutive mini-batches a worker is given at a time, past the first two it holds
_AHEAD = 1000  # mini-batches to run the plan is written ahead of the workers' demand, in time the loop would wait


class Driver:
    """Runs the pending mini-batches of one run to an outcome.

    Args:
        policy: retries, thresholds and timeouts (`ParallelRunConfig.driver_policy()`).
        pending: mini-batches already in the ledger, in plan order.
        write_plan: for a plan written while the run goes: writes the plan's next chunk into the ledger
            and returns it, `[]` once the plan is complete; called when `pending` runs out.
    """

    def __init__(
        self,
        policy: DriverPolicy,
        ledger: Ledger,
        pool: WorkerPool,
        pending: Iterator[MiniBatch],
        counters: Counters,
        report: Reporter,
        termination: Termination | None = None,
        write_plan: Callable[[], list[MiniBatch]] | None = None,
    ):
        self.ledger, self.pool, self.counters, self.report = ledger, pool, counters, report
        self.run_invocation_timeout = policy.run_invocation_timeout
        self.logs, self.log = report.logs, report.log
        self.canceled = CancelWatch(termination or Termination(threading.Event(), policy.termination_grace), report.log)
        self.retries = RetryPolicy(
            policy.fault_tolerant_policy, policy.run_max_try, policy.retryable_errors, policy.retryable_exit_codes
        )
        self.errors = ErrorGroups(policy.thresholds.max_same_error, report.logs)
        settings = pool.settings
        self.health = JobHealth(policy, counters, self.errors, settings.node_count, settings.process_count_per_node)
        self.outcomes = Outcomes(ledger, counters, self.retries, self.errors, self.health, report)
        self.worker_time = report.worker_time
        self._pending = pending
        self._write_plan = write_plan  # None once the plan is complete
        self._planned: collections.deque[MiniBatch] = collections.deque()  # written, after `pending`
        self._depth = QueueDepth(policy.read_ahead, policy.max_concurrency)
        self._lookahead: MiniBatch | None = None
        self._pending_done = False
        self._retry: collections.deque[tuple[MiniBatch, int]] = collections.deque()
        self._ready: dict[str, WorkerInfo] = {}
        self._queued: dict[str, collections.deque[Attempt]] = {}  # per ready worker, in run order
        self._started = time.monotonic()

    # The loop ---------------------------------------------------------------------------

    def run(self) -> tuple[RunStatus, str]:
        """Run until every mini-batch has an outcome; returns (status, status_reason)."""
        self.report.emit(
            "job_started", mini_batches=None if self.counters.planning else self.counters.mini_batches_total
        )
        try:
            self.health.check_thresholds()  # items that failed in reused mini-batches count too
            self.health.workers_starting()
            while self._has_work():
                self.canceled.check(in_flight=any(self._queued.values()))
                if not self.canceled.draining:
                    self._dispatch()
                wait = 0 if self._plan_ahead() else _COMMIT_WAIT_S if self.outcomes.dirty else _TICK_S
                for event in self.pool.next_events(wait):
                    self._handle(event)
                self.outcomes.commit(force=False)
                self.health.check()
                if self.report.due():
                    self.report.progress(self.progress())
            status, reason = self._final_status()
        except JobStopped as stop:
            status, reason = RunStatus(stop.status), str(stop)
            self.report.emit("threshold_exceeded" if status == RunStatus.FAILED else "job_canceled", reason=reason)
        self.worker_time.end_all(time.time())
        self.outcomes.commit()
        self.report.progress(self.progress())
        self.report.emit("job_finished", status=status, reason=reason)
        return status, reason

    def _has_work(self) -> bool:
        if self._retry or any(self._queued.values()):
            return True
        return self._peek_pending()

    def _peek_pending(self) -> bool:
        if self._lookahead is None and not self._pending_done:
            self._lookahead = next(self._pending, None)
            if self._lookahead is None and not self._planned:
                self._write_chunk()
            if self._lookahead is None and self._planned:
                self._lookahead = self._planned.popleft()
            self._pending_done = self._lookahead is None
            if self._pending_done:
                self.health.check_thresholds()  # the plan is complete: allowed_failed_percent can be judged
        return self._lookahead is not None

    def _plan_ahead(self) -> bool:
        """Write the plan's next chunk now, in time the loop would wait, while fewer than `_AHEAD` of its
        mini-batches wait to run: the plan is written while the workers start and while they work through
        their queues, rather than only when they need more (a rerun plans many mini-batches it reuses for
        each one it runs). Returns whether it wrote one."""
        if self._write_plan is None or len(self._planned) >= _AHEAD or self.canceled.draining:
            return False
        self._write_chunk()
        return True

    def _write_chunk(self) -> None:
        """The plan's next chunk with mini-batches to run, written into the ledger; none once it is complete."""
        if self._write_plan is not None:
            chunk = self._write_plan()
            self._planned.extend(chunk)
            if not chunk:
                self._write_plan = None

    def _next_mini_batch(self) -> tuple[MiniBatch, int] | None:
        if self._retry:
            return self._retry.popleft()
        if self._peek_pending() and (mini_batch := self._lookahead) is not None:
            self._lookahead = None
            return mini_batch, 1
        return None

    def _dispatch(self) -> None:
        """Fill the ready workers' queues, breadth first: every worker gets one before any gets two. Deeper
        queues (quick mini-batches) are filled a run of consecutive mini-batches at a time, so that a
        worker's results lie end to end in its spool and the output is assembled from long slices."""
        depth = self._depth.depth()
        level = min(map(len, self._queued.values()), default=depth)
        while level < depth:
            level = level + 1 if level < 2 else min(depth, level + _RUN)
            for worker_id, queued in self._queued.items():
                while len(queued) < level:
                    work = self._next_mini_batch()
                    if work is None:
                        return
                    mini_batch, attempt = work
                    queued.append(Attempt(mini_batch, attempt, time.time(), mini_batch.items))
                    self.pool.submit(self._ready[worker_id], mini_batch, attempt, self.run_invocation_timeout)
                    self.health.dispatched()

    # Events -----------------------------------------------------------------------------------

    def _handle(self, event: Event) -> None:
        worker = event.worker
        if isinstance(event, Ready):
            starting = self.health.worker_ready(worker)
            self._ready[worker.id] = worker
            self._queued[worker.id] = collections.deque()
            self.worker_time.ready(worker.id, time.time())
            self.report.emit(  # starting_s: a timeline's start-up bar
                "worker_started", worker=worker.id, pid=worker.pid, gpu=worker.gpu, starting_s=round(starting, 3)
            )
            gpu = f", CUDA_VISIBLE_DEVICES={worker.gpu}" if worker.gpu is not None else ""
            self.log.info("%s ready (pid %s%s)", worker.id, worker.pid, gpu)
        elif isinstance(event, Finished):
            self._finished(event)
        elif isinstance(event, Lost):
            self._lost(event)
        elif isinstance(event, InitFailed):
            self._init_failed(event)
        elif isinstance(event, ItemsLoaded):
            for attempt in self._queued.get(worker.id, ()):
                if attempt.mini_batch.index == event.mini_batch:
                    attempt.items = event.items
        elif isinstance(event, HangTimeoutChanged):
            limit = "no limit" if event.seconds is None else f"{event.seconds:g} s"
            self.log.info("%s set the run() timeout of its current mini-batch to %s", worker.id, limit)
            self.health.exempt(worker, event.seconds)

    def _finished(self, event: Finished) -> None:
        self.health.attempt_ended(event.worker)
        queued = self._queued[event.worker.id]
        if queued[0].mini_batch.index == event.mini_batch:  # a worker runs its queue in order
            current = queued.popleft()
        else:
            current = next(a for a in queued if a.mini_batch.index == event.mini_batch)
            queued.remove(current)
        outcome = event.outcome
        if outcome.refused_write:  # the worker's disk refused its rows: a retry cannot make space, nor mend a disk
            raise refused_write(*outcome.refused_write)
        items = outcome.items if outcome.items is not None else current.items
        current.started = outcome.started
        self.worker_time.attempt(event.worker.id, outcome.started, outcome.duration, outcome.input_s)
        self._depth.observe(outcome.duration)
        if outcome.ok:
            self.outcomes.succeeded(event.worker, current, items, outcome)
            return
        loss = LossReason.TIMED_OUT if outcome.timed_out else None  # an async worker cancelled it
        kind = loss or "failed"
        if self.outcomes.failed(event.worker, current, items, kind, outcome.error, None, outcome.duration, loss):
            self._retry.append((current.mini_batch, current.attempt + 1))

    def _lost(self, event: Lost) -> None:
        worker = event.worker
        self.health.worker_lost(worker)
        queued = self._queued.pop(worker.id, collections.deque())
        self._ready.pop(worker.id, None)
        current = next((a for a in queued if a.mini_batch.index == event.mini_batch), None)
        if current is not None:
            queued.remove(current)
        for unstarted in reversed(queued):  # not started, or finished but unreported: again, no attempt counted
            self._retry.appendleft((unstarted.mini_batch, unstarted.attempt))
        self._replace(worker, event.reason, event.detail)
        self.log.warning("%s lost (%s): %s; starting a replacement", worker.id, event.reason, event.detail)
        self.worker_time.ended(worker.id, time.time())
        if current is not None:
            duration = time.time() - current.started
            self.worker_time.attempt(worker.id, current.started, duration, 0.0)
            reason, detail, code = event.reason, event.detail, event.exit_code
            if self.outcomes.failed(worker, current, current.items, reason, detail, code, duration, reason):
                self._retry.append((current.mini_batch, current.attempt + 1))

    def _init_failed(self, event: InitFailed) -> None:
        worker = event.worker
        self.log.error("%s init() failed: %s", worker.id, error_line(event.error))
        was_stopped = self.health.node_stopped(worker.node_index)
        if self.health.init_failed(worker, event.error):
            self._replace(worker, "init_failed", error_line(event.error))
        elif not was_stopped:
            failures = self.health.init_failures_on(worker.node_index)
            self.log.error("node %s: init() failed %d times; no more workers start there", worker.node_id, failures)

    def _replace(self, worker: WorkerInfo, reason: str, detail: str) -> None:
        self.pool.replace(worker)
        self.health.worker_replaced(worker)
        self.report.emit("worker_replaced", worker=worker.id, reason=reason, detail=detail)

    # The end ------------------------------------------------------------------------------------

    def _final_status(self) -> tuple[RunStatus, str]:
        counters = self.counters
        if counters.mini_batches_failed or counters.items_failed:
            return RunStatus.SUCCEEDED, (
                f"{counters.items_failed} items in {counters.mini_batches_failed} failed mini-batches "
                f"were within the thresholds. {self.errors.first()}"
            ).strip()
        return RunStatus.SUCCEEDED, "every mini-batch succeeded"

    def progress(self) -> RunSummary:
        busy = sum(1 for queued in self._queued.values() if queued)
        return snapshot(self.counters, time.monotonic() - self._started, busy, len(self._queued) - busy)
