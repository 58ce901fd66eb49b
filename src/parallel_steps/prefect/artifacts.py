"""What a `parallel_run` task run shows in Prefect (the hooks of its run): progress log lines and a
progress artifact (the core's text, `follow.progress_line`), tables of the run summary and of its
failed mini-batches, a markdown artifact with the key figures, the error groups and the path
of the run's report page, and a link artifact to that page.

Artifact keys are the step name plus a suffix (step names are valid keys), so
each step's artifacts keep one history across flow runs. Every artifact call passes `_sync=True`:
Prefect dispatches them to coroutines inside an async task (`parallel_run_async`), where a plain
call would create nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

from ..config import ParallelRunConfig
from ..config.secrets import public_config
from ..jobs import Follower, RunHooks, run_status
from ..report import report_markdown
from ..report.text import end_line, progress_line
from ..summary import RunStatus

FAILED_ROWS_SHOWN = 100  # a table artifact is for reading, the full list is in the run's logs
PARTITION_ROWS_SHOWN = 500  # the summary (the task's result, run.json) has every partition
_PARTITION_COLUMNS = (
    "status",
    "mini_batches_total",
    "mini_batches_failed",
    "mini_batches_reused",
    "mini_batches_run",
    "items_total",
    "items_failed",
    "rows_written",
    "output_file",
    "status_reason",
)
_FAILED_COLUMNS = ("idx", "source", "items", "attempts", "error", "exit_code", "worker", "duration")
_WARN_EVENTS = {"mini_batch_failed", "worker_replaced", "threshold_exceeded", "job_canceled"}


class Progress(RunHooks):
    """Reports a running step: the progress artifact and a log line per progress snapshot, warnings and
    the job events a user should see."""

    def __init__(self, name: str, logger: logging.LoggerAdapter[Any] | logging.Logger):
        self.name, self.logger = name, logger
        self.artifact_id = create_progress_artifact(
            0.0, key=f"{name}-progress", description=f"Step {name}: planning mini-batches", _sync=True
        )

    def progress(self, snapshot: Mapping[str, Any]) -> None:
        line = progress_line(snapshot)
        self.logger.info("%s: %s", self.name, line)
        self._set(snapshot.get("mini_batches_done", 0), snapshot.get("mini_batches_total", 0), line)

    def finish(self, summary: Mapping[str, Any]) -> None:
        """The final state, also when no worker ran (the whole step was reused) or the step stopped early."""
        done = summary["mini_batches_succeeded"] + summary["mini_batches_failed"]
        self._set(done, summary["mini_batches_total"], end_line(summary))

    def _set(self, done: int, total: int, text: str) -> None:
        percent = 100.0 * done / total if total else 100.0
        try:
            update_progress_artifact(self.artifact_id, percent, description=f"Step {self.name}: {text}", _sync=True)
        except Exception as exc:  # a lost progress update must not stop the step; the next one may land
            self.logger.warning("%s: progress artifact not updated (%s)", self.name, exc)

    def event(self, event: Mapping[str, Any]) -> None:
        if event["type"] in _WARN_EVENTS:
            detail = ", ".join(f"{k}={v}" for k, v in event.items() if k not in ("type", "time"))
            self.logger.warning("%s: %s (%s)", self.name, event["type"].replace("_", " "), detail)

    def warn(self, message: str) -> None:
        self.logger.warning("%s: %s", self.name, message)

    def launched(self, follower: Follower, where: str) -> None:
        self.logger.info("step %s: %s", self.name, where)


def publish_summary(summary: Mapping[str, Any]) -> None:
    """The run summary as a table artifact, the report's key figures and error groups as markdown (the
    page itself is a file in the run folder), and the failed mini-batches as a table, when any."""
    name = summary["name"]
    create_table_artifact(
        _summary_rows(summary),
        key=f"{name}-summary",
        description=f"Step {name}: {summary['status']}: {summary['status_reason']}",
        _sync=True,
    )
    create_markdown_artifact(
        report_markdown(summary), key=f"{name}-report", description=f"Step {name}: key figures and errors", _sync=True
    )
    if page := summary.get("report_url") or (summary.get("report") and Path(summary["report"]).as_uri()):
        create_link_artifact(
            page,
            link_text=f"Run report of step {name}",
            key=f"{name}-report-link",
            description=_where(summary),
            _sync=True,
        )
    if summary.get("partitions"):
        _publish_partitions(name, summary["partitions"])
    failed = failed_mini_batches(summary["run_dir"])
    if failed:
        shown = failed[:FAILED_ROWS_SHOWN]
        more = f" (first {len(shown)} of {len(failed)})" if len(failed) > len(shown) else ""
        create_table_artifact(
            shown,
            key=f"{name}-failed-mini-batches",
            description=f"Step {name}: failed mini-batches{more}; "
            f"tracebacks under {summary['run_dir']}/logs/user/error/",
            _sync=True,
        )


def _publish_partitions(name: str, partitions: Mapping[str, Mapping[str, Any]]) -> None:
    """A step over partitions: a table of its partitions, those that failed first (else in the step's order)."""
    failed = [key for key, result in partitions.items() if result["status"] != RunStatus.SUCCEEDED]
    keys = failed + [key for key, result in partitions.items() if result["status"] == RunStatus.SUCCEEDED]
    shown = keys[:PARTITION_ROWS_SHOWN]
    more = f" (first {len(shown)} of {len(keys)})" if len(keys) > len(shown) else ""
    create_table_artifact(
        [{"partition": key, **{column: partitions[key].get(column) for column in _PARTITION_COLUMNS}} for key in shown],
        key=f"{name}-partitions",
        description=f"Step {name}: {len(keys) - len(failed)} partitions succeeded, {len(failed)} failed{more}",
        _sync=True,
    )


def _where(summary: Mapping[str, Any]) -> str:
    if summary.get("report_url"):
        return "uploaded beside the output"
    return "on the machine that ran the step (an output URL keeps a copy beside the output)"


def failed_mini_batches(run_dir: str) -> list[dict[str, Any]]:
    """The failed mini-batches of a run, as rows of the columns a user needs to find the cause."""
    rows = run_status(run_dir, mini_batches=True).get("mini_batches", [])
    return [{column: row.get(column) for column in _FAILED_COLUMNS} for row in rows if row["state"] == "failed"]


def _summary_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per summary field, then the configuration fields that differ from their defaults."""
    rows = [{"field": key, "value": value} for key, value in summary.items() if not isinstance(value, dict)]
    defaults = public_config(ParallelRunConfig())
    for key, value in summary.get("config", {}).items():
        if value != defaults.get(key):
            rows.append({"field": f"config.{key}", "value": value if _scalar(value) else json.dumps(value)})
    return rows


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))
