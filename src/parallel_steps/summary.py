"""The run summary: one shape for `run.json`, the value `run_step` returns, progress snapshots,
`--json`, `status`, Airflow's XCom and Prefect's task result.

A summary is a plain JSON-able dict (engines store it as is, users read `summary["status"]`);
`RunSummary` is that dict with a typed attribute per key (`summary.status` is a `RunStatus`).
`Counters` are what the step and the driver count while a run goes; `summarize` and `snapshot`
turn them into summaries.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class RunStatus(StrEnum):
    """Where a run is. A `str`: it compares equal to its text and is written as it ("Succeeded")."""

    QUEUED = "Queued"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELED = "Canceled"


TERMINAL = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELED)
#: Counts of work done that a run keeps in its ledger, so a restart or a resume goes on counting.
RESUMED_COUNTS = (
    "workers_started",
    "attempts_retried",
    "mini_batches_new",
    "inputs_new",
    "inputs_changed",
    "inputs_deleted",
)


class _Key(Generic[T]):
    """One key of a summary, read as a typed attribute (`summary.items_failed` is `summary["items_failed"]`)."""

    def __init__(self, convert: Callable[[Any], T] | None = None) -> None:
        self.convert = convert
        self.key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    @overload
    def __get__(self, summary: None, owner: type) -> _Key[T]: ...
    @overload
    def __get__(self, summary: RunSummary, owner: type) -> T: ...
    def __get__(self, summary: RunSummary | None, owner: type) -> _Key[T] | T:
        if summary is None:
            return self
        try:
            value = summary[self.key]
        except KeyError:
            raise AttributeError(f"this summary has no {self.key!r}") from None
        return self.convert(value) if self.convert else value


class RunSummary(dict[str, Any]):
    """What a run reports about itself (DESIGN.md section 4): a dict, so engines and JSON take it as is,
    with typed attributes for readers. Progress snapshots carry the counts and the `mini_batches_done`
    ... `workers_idle` keys; final summaries the rest. A key a summary lacks is an AttributeError."""

    __slots__ = ()  # no attributes beside the keys

    run_id = _Key[str]()
    name = _Key[str]()
    status = _Key(RunStatus)
    status_reason = _Key[str]()
    reused = _Key[bool]()  # the whole step was restored from an earlier run; no worker started
    run_dir = _Key[str]()
    output = _Key[str | None]()
    output_file = _Key[str | None]()
    items_total = _Key[int]()
    items_succeeded = _Key[int]()
    items_failed = _Key[int]()
    mini_batches_total = _Key[int]()
    mini_batches_succeeded = _Key[int]()
    mini_batches_failed = _Key[int]()
    mini_batches_reused = _Key[int]()  # results taken from earlier runs
    mini_batches_run = _Key[int]()  # mini-batches this run ran to an outcome
    mini_batches_pending = _Key[int]()
    mini_batches_new = _Key[int]()  # mini-batches the earlier plan did not have (all of them in a first run)
    inputs_new = _Key[int]()  # input files the earlier plan did not have
    inputs_changed = _Key[int]()  # files whose size, time or content changed since the earlier plan
    inputs_deleted = _Key[int]()  # files of the earlier plan that are gone (their rows are not in the output)
    attempts_retried = _Key[int]()
    workers_started = _Key[int]()
    shutdown_cut_off = _Key[list[str]]()  # workers whose shutdown() was killed after the bound
    worker_time = _Key[dict[str, Any]]()  # shares of the workers' time in run(), waiting for input, idle (driver/)
    append_row_format = _Key[str | None]()  # what the output file holds: text (ParallelRunStep's), csv, parquet, jsonl
    rows_written = _Key[int]()  # rows (elements run() returned) in the output file; 0 before it is assembled
    output_bytes = _Key[int | None]()  # size of the output file; None when there is none
    metrics_logged = _Key[int]()  # Run.get_context().log... calls of the entry scripts (logs/user/metrics/)
    report = _Key[str | None]()  # logs/report.html, the run's page (None with report: false)
    report_url = _Key[str | None]()  # the page uploaded beside an output URL (upload_report); None otherwise
    started_at = _Key[str]()
    ended_at = _Key[str | None]()
    elapsed_s = _Key[float]()
    restarts = _Key[list[dict[str, str]]]()
    job_result = _Key[str]()
    config = _Key[dict[str, Any]]()  # the effective configuration, secrets masked
    pid = _Key[int]()
    host = _Key[str]()
    partitions = _Key[dict[str, dict[str, Any]]]()  # a step over partitions: each one's status and counts
    partitions_failed = _Key[list[str]]()  # ... and the keys of those that failed (their outputs are not written)
    ray_job = _Key[str]()  # the Ray job that runs the driver (`submit_to: ray_job`; added by `jobs.run_status`)
    # progress snapshots
    mini_batches_done = _Key[int]()
    rate_per_s = _Key[float]()
    eta_s = _Key[float | None]()
    workers_busy = _Key[int]()
    workers_idle = _Key[int]()


@dataclass
class Counters:
    """The run's counts, kept by the step (planning, reuse) and the driver (outcomes)."""

    mini_batches_total: int = 0
    mini_batches_succeeded: int = 0
    mini_batches_failed: int = 0
    mini_batches_reused: int = 0
    items_total: int = 0
    items_succeeded: int = 0
    items_failed: int = 0
    items_with_errors: int = 0  # of items_failed, those whose rows returned an error (not reused by a rerun)
    items_without_result: int = 0  # items run() returned no result for, not counted as failures (error_threshold -1)
    attempts_retried: int = 0
    workers_started: int = 0
    init_failures: int = 0
    mini_batches_new: int = 0
    inputs_new: int = 0
    inputs_changed: int = 0
    inputs_deleted: int = 0
    planning: bool = False  # the plan is still being written: mini_batches_total will grow
    #: Whether an item run() returned no result for is a failure (ParallelRunStep's rule); with error_threshold -1
    #: a script that writes its own files and returns nothing succeeds, and those items are counted apart.
    no_result_fails: bool = True

    @property
    def done(self) -> int:
        return self.mini_batches_succeeded + self.mini_batches_failed

    @property
    def run(self) -> int:
        """Mini-batches that got their outcome in this run (not taken from an earlier one)."""
        return self.done - self.mini_batches_reused

    def add_succeeded(self, items: int, items_failed: int, reused: bool = False, without_result: int = 0) -> None:
        """A succeeded mini-batch of `items`, `items_failed` of them without a good result, `without_result` of
        those because run() returned fewer results than items."""
        without = 0 if self.no_result_fails else min(without_result, items_failed)
        self.mini_batches_succeeded += 1
        self.mini_batches_reused += reused
        self.items_total += items
        self.items_succeeded += items - items_failed
        self.items_failed += items_failed - without
        self.items_without_result += without

    def add_failed(self, items: int) -> None:
        self.mini_batches_failed += 1
        self.items_total += items
        self.items_failed += items

    def counts(self) -> RunSummary:
        return RunSummary(
            items_total=self.items_total,
            items_succeeded=self.items_succeeded,
            items_failed=self.items_failed,
            items_with_errors=self.items_with_errors,
            items_without_result=self.items_without_result,
            mini_batches_total=self.mini_batches_total,
            mini_batches_succeeded=self.mini_batches_succeeded,
            mini_batches_failed=self.mini_batches_failed,
            mini_batches_reused=self.mini_batches_reused,
            mini_batches_run=self.run,
            mini_batches_new=self.mini_batches_new,
            inputs_new=self.inputs_new,
            inputs_changed=self.inputs_changed,
            inputs_deleted=self.inputs_deleted,
            attempts_retried=self.attempts_retried,
            workers_started=self.workers_started,
        )

    @classmethod
    def of(cls, summary: Mapping[str, Any], no_result_fails: bool = True) -> Counters:
        """The counts of an earlier run's summary, to judge them against this run's thresholds: under which
        items without a result are failures (`no_result_fails`) or not."""
        without = summary.get("items_without_result", 0)
        return cls(
            mini_batches_total=summary.get("mini_batches_total", 0),
            mini_batches_succeeded=summary.get("mini_batches_succeeded", 0),
            mini_batches_failed=summary.get("mini_batches_failed", 0),
            items_failed=summary.get("items_failed", 0) + (without if no_result_fails else 0),
            items_without_result=0 if no_result_fails else without,
        )


def snapshot(counters: Counters, elapsed: float, busy: int, idle: int) -> RunSummary:
    """A progress snapshot: the counts, the rate of this run and the time left."""
    remaining = counters.mini_batches_total - counters.done
    rate = counters.run / elapsed if elapsed > 0 else 0.0
    summary = RunSummary(status=RunStatus.RUNNING.value)
    summary.update(counters.counts())
    summary.update(
        mini_batches_done=counters.done,
        elapsed_s=round(elapsed, 3),
        rate_per_s=round(rate, 3),
        eta_s=round(remaining / rate, 1) if rate > 0 and not counters.planning else None,
        workers_busy=busy,
        workers_idle=idle,
    )
    return summary


def summarize(
    counters: Counters, status: RunStatus, reason: str, started_at: float, fields: Mapping[str, Any]
) -> RunSummary:
    """A run's summary from its counts; `fields` are the rest (run_id, run_dir, output, config, ...). The
    status is written as its text, so the summary holds JSON's types only."""
    ended = time.time()
    summary = RunSummary(status=RunStatus(status).value, status_reason=reason, reused=False)
    summary.update(counters.counts())
    summary.update(
        started_at=timestamp(started_at),
        ended_at=timestamp(ended) if status in TERMINAL else None,
        elapsed_s=round(ended - started_at, 3),
    )
    summary.update(fields)
    return summary


def timestamp(when: float | None = None) -> str:
    return _timestamp_of_second(int(when if when is not None else time.time()))


@functools.lru_cache(maxsize=4)
def _timestamp_of_second(second: int) -> str:
    """Formatting a time costs more than the rest of a mini-batch's log row; a second has one text."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
