"""The step API: `run_step(config)`, the one entry every integration's driver runs through (the
front ends reach it through `jobs/launch.py`; `ParallelRunStep` is parallel_run_step.py).

A run goes: check everything that can be checked (run/checks.py; nothing is written on
a user error) -> open its run directory (store/rundir.py) and wait for a run of the
same step on the same inputs to end -> plan into the ledger (run/plan.py), taking
finished results from earlier runs (run/reuse.py), then restore the whole step or run
the rest on a worker pool (pool/factory.py) with the driver (driver/); with nothing
to reuse, the plan streams into the running workers instead -> assemble the output
-> write the summary (summary.py). Integrations only map their engine onto this.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from logging import Logger
from pathlib import Path

from ..config.model import ParallelRunConfig
from ..config.secrets import public_config, storage_settings
from ..control import Cancel, JobCanceled
from ..driver import Driver, EventCallback, ProgressCallback, Reporter, Termination, threshold_breach
from ..errors import ConfigError, InputError, StepFailed
from ..host import require_linux
from ..inputs.minibatch import MiniBatch
from ..masking import mask_urls
from ..pool.base import WorkerPool
from ..report import upload_report, write_run_report
from ..storage import options as storage_options
from ..store.rundir import RunDirectory
from ..store.runs import RunIndex, key_lock, write_summary
from ..store.space import cannot_write, refusals_told, where_it_fits, write_cause, write_failed_line
from ..summary import Counters, RunStatus, RunSummary, summarize, timestamp
from .checks import check_step
from .delivery import Delivered, deliver
from .plan import RunPlan, planner_for
from .reuse import ReuseSources, inputs_key, restore_whole_step, step_code_key, step_key
from .workers import RunWorkers


def run_step(
    config: ParallelRunConfig,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    run_id: str | None = None,
    on_progress: ProgressCallback | None = None,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
    entry_callables: bytes | None = None,
) -> RunSummary:
    """Run one parallel step to its end, with the driver in this process, and return the run summary.

    `submit_to` is for the callers that can send the driver elsewhere (they launch through
    `launch.Launcher`); here the driver always runs in this process.

    Args:
        config: the step's configuration.
        run_dir: the run directory; a rerun in the same directory resumes it (default: a new
            directory under the run root).
        run_id: the id of a new run (default: generated from the step name).
        on_progress: called with a progress snapshot every few seconds and at the end.
        on_event: called with job events (started, mini-batch failed, worker replaced, ...).
        cancel: set it to stop the run; the summary then says `Canceled`. A `control.Cancel`
            set twice stops at once, without the grace for mini-batches in flight.
        entry_callables: cloudpickled `{"init": f, "run": g, "shutdown": h}` used instead of `entry_script`
            (`shipping.ship_functions(run, init, shutdown)` makes them).

    Raises:
        ConfigError, InputError: before anything is written.
        WriteRefused: the disk refused a write before the run had a summary (the run index, a lock, run.json).
        StepFailed: the run ended Failed or Canceled; `.summary` is the run summary.
    """
    require_linux()
    with storage_options.using(storage_settings(config)), refusals_told(config.resolved_run_root()):
        return _StepRun(config, run_dir, run_id, on_progress, on_event, cancel, entry_callables).execute()


def reuse_key(config: ParallelRunConfig, entry_callables: bytes | None = None) -> str:
    """The step's reuse key (DESIGN.md section 6), computed without running: equal keys mean an
    earlier successful run's output is reused. Integrations use it as their cache key."""
    with storage_options.using(storage_settings(config)):
        code = step_code_key(config, check_step(config, entry_callables), entry_callables)
        planner = planner_for(config.plan_settings())
        return step_key(code, (mini_batch.fingerprint for mini_batch in planner.mini_batches()))


# One run ---------------------------------------------------------------------------------------


class _StepRun:
    """One invocation of `run_step`: its phases, in order."""

    def __init__(
        self,
        config: ParallelRunConfig,
        run_dir: str | os.PathLike[str] | None,
        run_id: str | None,
        on_progress: ProgressCallback | None,
        on_event: EventCallback | None,
        cancel: threading.Event | None,
        entry_callables: bytes | None,
    ):
        self.config, self.entry_callables = config, entry_callables
        self.on_progress, self.on_event = on_progress, on_event
        self.cancel = cancel or Cancel()
        self.checked = check_step(config, entry_callables)
        self.code = step_code_key(config, self.checked, entry_callables)
        self.run_root = config.resolved_run_root()
        self.requested_dir, self.requested_id = (Path(run_dir).absolute() if run_dir else None), run_id
        self.started_at = time.time()
        self.restarts: list[dict[str, str]] = []
        self.shutdown_cut_off: list[str] = []
        self.delivered = Delivered()
        self.disk_full = False  # the run failed for lack of space: the first full disk it met is the one it names

    # The phases ----------------------------------------------------------------------------

    def execute(self) -> RunSummary:
        self.run = RunDirectory(
            self.run_root, self.config.name, self.code, self.config.output, self.requested_dir, self.requested_id
        )
        try:
            summary = self._execute(RunIndex(self.run_root))
        finally:
            self.run.release()
        if summary.status != RunStatus.SUCCEEDED and not summary.reused:
            raise StepFailed(summary)
        return summary

    def _execute(self, index: RunIndex) -> RunSummary:
        """Plan and run in the locked run directory; what is left of it afterwards."""
        self.run.drop_stale_cancel(self.started_at)
        self.termination = Termination(self.cancel, self.config.termination_grace, self.run.path)
        self.workers = RunWorkers(self.config, self.checked, self.entry_callables, self.run)
        self.plan = self._new_plan()
        try:
            summary = self._plan_and_run(index)
        except (InputError, ConfigError):  # a user error, found before any mini-batch ran: leave no trace
            index.remove(self.run.run_id)
            self.run.discard()
            raise
        finally:
            index.close()
        if summary.reused:
            self.run.keep_reused(summary) if self.run.chosen else self.run.discard()
        return summary

    def _plan_and_run(self, index: RunIndex) -> RunSummary:
        with contextlib.ExitStack() as stack:
            scope = stack.enter_context(contextlib.ExitStack())  # the workers': closed before the output is assembled
            lock = inputs_key(self.code, self.config.inputs)
            try:
                check = self.termination.check
                stack.enter_context(key_lock(self.run_root, lock, self.config.first_task_creation_timeout, check))
                sources = self._sources(index)
                self.plan.start(sources or None)
                stack.callback(self.plan.close)  # a rerun's stat helper ends with the plan, whatever ends it
                # With results to take, written up to the first mini-batch to run before any worker starts.
                first = self.plan.write_next_chunk(check=True) if sources else []
            except JobCanceled:  # waiting for another run, or planning: nothing ran; a rerun plans again
                self.run.ledger.rollback()
                return self._run(index, scope, iter(()), None)
            if sources and not first:  # every mini-batch has a result: every fingerprint is known
                key = step_key(self.code, self.run.ledger.fingerprints())
                if (
                    self.config.allow_reuse
                    and not self.config.partitions
                    and (  # partitions: delivered one by one
                        summary := restore_whole_step(index, key, self.run, self.config, self.started_at)
                    )
                ):
                    return summary
                return self._run(index, scope, iter(()), None)
            # The workers start; the driver has the rest of the plan written as it needs more (_write_plan).
            return self._run(index, scope, iter(first), scope.enter_context(self.workers.pool()))

    def _sources(self, index: RunIndex) -> ReuseSources:
        run = self.run
        own = run.ledger if run.resumed else None
        return ReuseSources(run.run_id, own, index, self.code, self.config.allow_reuse, link=run.link_spool)

    def _run(
        self, index: RunIndex, scope: contextlib.ExitStack, pending: Iterator[MiniBatch], pool: WorkerPool | None
    ) -> RunSummary:
        run, logs = self.run, self.run.logs
        index.register(run.run_id, self.config.name, run.path, RunStatus.RUNNING, self.code)
        self.log = log = logs.master_logger(run.run_id)
        self.report = Reporter(logs, log, self.on_progress, self.on_event)
        log.info("run %s of step %s in %s", run.run_id, self.config.name, run.path)
        if ignored := ", ".join(self.config.ignored_fields):
            log.info("%s: accepted as ParallelRunConfig takes them, no effect here", ignored)
        if not self.plan.counters.planning and self.termination.reason is None:  # a plan canceled is no plan
            _log_plan(self.plan, self.run.resumed, self.log)
        running = self._summary(RunStatus.RUNNING, "running")
        write_summary(run.path, RunSummary(**running, pid=os.getpid(), host=os.uname().nodename))
        while True:
            try:
                status, reason = self._drive(scope, pending, pool)
                if status == RunStatus.SUCCEEDED:
                    spans, check = self.plan.partition_spans(), self.termination.check
                    self.delivered, status, reason = deliver(run, self.config, spans, check, self.log, reason)
                break
            except JobCanceled as stop:  # in a phase of the step's own (driver/termination.py)
                scope.close()
                status, reason = RunStatus.CANCELED, str(stop)
                break
            except (ConfigError, InputError):  # found when the workers start (e.g. a bad ray_address)
                logs.close(log)
                raise
            except Exception as exc:  # a system error of the driver itself
                if cannot_write(exc):  # a restart cannot make space, nor mend a disk
                    status, reason = RunStatus.FAILED, write_failed_line(exc, run.path)
                    self.disk_full = True
                    log.error("%s", reason)
                    with where_it_fits():
                        scope.close()
                    break
                log.exception("system error")
                scope.close()
                if len(self.restarts) >= self.config.max_job_restarts:
                    status, reason = RunStatus.FAILED, f"system error: {type(exc).__name__}: {exc}"
                    break
                pending, pool = self._restart(exc, index), None
        summary = self._summary(status, reason)
        self._finish(index, summary)
        return summary

    def _restart(self, exc: Exception, index: RunIndex) -> Iterator[MiniBatch]:
        """Resume after a system error: what the ledger committed stands, the rest is planned and runs again.
        The counts of work done so far (workers started, attempts retried) carry over."""
        reason = f"{type(exc).__name__}: {exc}"
        self.restarts.append(dict(time=timestamp(), reason=reason))
        self.log.warning(
            "restart %d of %d after a system error: %s", len(self.restarts), self.config.max_job_restarts, reason
        )
        self.report.emit("restart", restart=len(self.restarts), reason=reason)
        self.run.logs.flush()
        self.run.ledger.rollback()
        self.run.resumed = True
        self.plan = self._new_plan()
        self.plan.whole(self._sources(index))
        _log_plan(self.plan, self.run.resumed, self.log)
        return self.run.ledger.pending()

    def _drive(
        self, scope: contextlib.ExitStack, pending: Iterator[MiniBatch], pool: WorkerPool | None
    ) -> tuple[RunStatus, str]:
        self.termination.check()
        counters = self.plan.counters
        if not counters.planning and counters.done == counters.mini_batches_total:
            self.log.info("every mini-batch was reused; no worker started")
            breach = threshold_breach(self.config.thresholds(), counters)
            if breach:
                return RunStatus.FAILED, breach
            return RunStatus.SUCCEEDED, "every mini-batch was reused from earlier runs"
        self.run.make_output_dir()
        pool = pool or scope.enter_context(self.workers.pool())
        with self.workers.monitor(pool, self.log):
            write_plan = self._write_plan if counters.planning else None
            policy = self.config.driver_policy()
            driver = Driver(policy, self.run.ledger, pool, pending, counters, self.report, self.termination, write_plan)
            status, reason = driver.run()
        grace = self.termination.shutdown_grace(self.config.shutdown_seconds)  # after a cancel: its share
        with self.termination.guard(pool, self.log):  # a cancel now bounds shutdown() too
            pool.close(grace)  # workers stop (and run shutdown()) before the output
            scope.close()
        self.run.logs.write_error_summary(driver.errors.summary())
        self.shutdown_cut_off += _cut_off(pool, grace, self.log, self.report)
        return status, reason

    def _new_plan(self) -> RunPlan:
        run, counters = self.run, Counters(no_result_fails=self.config.error_threshold != -1)  # -1: not failures
        return RunPlan(
            self.config.plan_settings(), run.ledger, run.run_id, run.resumed, self.termination.check, counters
        )

    def _write_plan(self) -> list[MiniBatch]:
        """The plan's next chunk, written into the ledger, for the driver; the plan is logged once complete."""
        chunk = self.plan.write_next_chunk()
        if not chunk:
            _log_plan(self.plan, self.run.resumed, self.log)
        return chunk

    # Records ----------------------------------------------------------------------------------

    def _summary(self, status: RunStatus, reason: str) -> RunSummary:
        run = self.run
        return summarize(
            self.plan.counters,
            status,
            reason,
            self.started_at,
            RunSummary(
                run_id=run.run_id,
                name=self.config.name,
                run_dir=str(run.path),
                output=mask_urls(run.output_url or str(run.output_dir)),
                append_row_format=self.config.output_format if self.config.output_action == "append_row" else None,
                report_url=None,
                metrics_logged=run.logs.count_metrics(),
                shutdown_cut_off=self.shutdown_cut_off,
                worker_time=self.report.worker_time.summary(),
                restarts=self.restarts,
                job_result=str(run.logs.job_result),
                config=public_config(self.config),
                **self.delivered.summary_keys(status),
            ),
        )

    def _finish(self, index: RunIndex, summary: RunSummary) -> None:
        """The run's records (ledger, report, run.json, job_result.txt), then its row in the index. A disk
        that fills now fails the run in one line; what still fits of the records is written."""
        key = None
        try:
            key = self._write_records(summary)
        except Exception as exc:
            if not cannot_write(exc):
                raise
            if not self.disk_full:
                summary.update(status=RunStatus.FAILED, status_reason=write_failed_line(exc, self.run.path))
            _records_lost(self.run, summary)
        with where_it_fits():
            self.run.logs.close(self.log)
        _record_end(index, self.run.run_id, summary, key)

    def _write_records(self, summary: RunSummary) -> str | None:
        """The run's own records; returns the step key whole-step reuse finds it by (None: not to be reused)."""
        run, logs, fingerprints = self.run, self.run.logs, self.run.ledger.fingerprints()
        key = step_key(self.code, fingerprints) if summary.status == RunStatus.SUCCEEDED and all(fingerprints) else None
        run.ledger.set(status=summary.status.value)
        run.ledger.close()
        logs.flush()  # the report reads the attempts and events
        _write_report(run, self.config, summary, self.termination, self.log)
        write_summary(run.path, summary)
        logs.write_result(summary)
        if not logs.error_summary.exists():
            logs.write_error_summary("No errors.\n")
        self.log.info("%s: %s", summary.status, summary.status_reason)
        return key


def _cut_off(pool: WorkerPool, grace: float, log: logging.Logger, report: Reporter) -> list[str]:
    """The workers whose shutdown() the pool cut off, logged and told as events."""
    for worker in pool.shutdown_cut_off:
        log.warning("%s: shutdown() was cut off after %g s; the worker was killed", worker, round(grace, 1))
        report.emit("shutdown_cut_off", worker=worker)
    return pool.shutdown_cut_off


def _record_end(index: RunIndex, run_id: str, summary: RunSummary, key: str | None) -> None:
    """The run's row in the index, at its end, with its step key. Bookkeeping: a disk that refuses it leaves the
    run's result as it is (in its run.json, which whoever reads the run's state looks at first; the next command
    that reads the index mends the row from it), and says so in one line; the run is then not reused whole."""
    keyed = {"step_key": key} if key else {}
    try:
        index.update(run_id, status=summary.status.value, ended_at=time.time(), summary=summary, **keyed)
    except Exception as exc:
        if not cannot_write(exc):
            raise
        logging.getLogger(__name__).warning(
            "%s: %s; the run index still says this run is running (its run.json has its end: %s)",
            index.path,
            write_cause(exc),
            summary.status.value,
        )


def _log_plan(plan: RunPlan, resumed: bool, log: Logger) -> None:
    counters = plan.counters
    total, reused = counters.mini_batches_total, counters.mini_batches_reused
    log.info("%d mini-batches planned; %d reused%s", total, reused, " (resumed)" if resumed else "")
    for note in plan.notes:
        log.warning("plan: %s", note)


def _write_report(
    run: RunDirectory, config: ParallelRunConfig, summary: RunSummary, termination: Termination, log: Logger
) -> None:
    """logs/report.html, bounded (a canceled run does not wait for its report past the grace), and
    uploaded beside an output URL when the run succeeded."""
    summary["report"] = None
    if config.report:
        summary["report"] = termination.bounded(
            lambda: write_run_report(run.path, summary, run.logs.attempts.columns(), log), "the report", log
        )
    if summary.status == RunStatus.SUCCEEDED and run.output_url and config.upload_report:
        summary["report_url"] = upload_report(summary["report"], run.output_url, config.append_row_file_name, log)


def _records_lost(run: RunDirectory, summary: RunSummary) -> None:
    """The disk filled while the run's records were written (the run has failed, in one line): what fits is written."""
    summary["report"] = None
    with where_it_fits():
        run.ledger.close()
    with where_it_fits():
        write_summary(run.path, summary)
