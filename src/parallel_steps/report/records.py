"""What one run recorded, read back for its report: the summary, the attempts of this invocation
(`logs/sys/job_report/processed_mini-batches.csv`), its job events (`logs/sys/events.jsonl`),
the ledger's rows and the monitor's samples. Times are seconds since the driver of this
invocation started (its `job_started` event).
"""

from __future__ import annotations

import csv
import json
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ..environment import mask_environment
from ..store.ledger import Ledger
from ..store.logs import RunLogs, WorkerLogPaths
from ..store.runs import read_summary

_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class Attempt(NamedTuple):
    """One row of processed_mini-batches.csv, times relative to the report's origin."""

    mini_batch: int
    attempt: int
    worker: str
    pid: int | None
    items: int | None
    items_succeeded: int | None
    outcome: str
    start: float
    duration: float
    error: str

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass
class RunRecords:
    """What this invocation of a run recorded (a resumed run folder holds earlier ones too)."""

    run_dir: Path
    logs: RunLogs
    summary: Mapping[str, Any]
    origin: float  # Unix time of 0 s: this invocation's job_started, else its start
    attempts: list[Attempt]  # in start order
    events: list[dict[str, Any]]  # with "t": seconds since origin

    def ledger_rows(self, indices: Iterable[int] | None = None) -> list[dict[str, Any]]:
        """Ledger rows (all, or those of `indices`); none when the folder has no ledger."""
        ledger = Ledger.open_readonly(self.run_dir / "ledger.sqlite")
        if ledger is None:
            return []
        try:
            if indices is None:
                return ledger.rows()
            return [row for idx in indices for row in ledger.rows(idx)]
        finally:
            ledger.close()

    @property
    def span(self) -> float:
        ends = [a.end for a in self.attempts] + [e["t"] for e in self.events]
        return float(max([0.0, *ends]))

    def last_attempts(self) -> dict[int, int]:
        """Each mini-batch's last attempt in this invocation: its outcome is the mini-batch's (so far)."""
        return {a.mini_batch: a.attempt for a in self.attempts}  # in start order: the last one wins

    def worker_logs(self, worker: str, create: bool = True) -> WorkerLogPaths:
        """The log files of a worker as events and attempts name it (`node/process`)."""
        node_id, process_name = worker.split("/", 1)
        return self.logs.worker(node_id, process_name, create)

    def error_log(self, worker: str) -> Path:
        return self.worker_logs(worker).error

    def workers(self) -> list[str]:
        """One timeline row per worker process: those that ran an attempt, started or were replaced."""
        named = {a.worker for a in self.attempts} | {e["worker"] for e in self.events if e.get("worker")}
        return sorted(named, key=natural)


def mask_config(config: dict[str, Any]) -> dict[str, Any]:
    """The effective config as shown to people (summaries hold it masked already; this page may be made from
    any run directory)."""
    return {**config, "environment_variables": mask_environment(config.get("environment_variables") or {})}


# Reading ------------------------------------------------------------------------------------------


def read_run(run_dir: str | Path, summary: Mapping[str, Any] | None = None) -> RunRecords:
    """The records of the run in `run_dir` (its latest invocation); `summary` defaults to run.json."""
    run_dir = Path(run_dir)
    summary = summary or read_summary(run_dir) or {}
    logs = RunLogs(run_dir, create=False)
    started = unix(summary.get("started_at"))
    events = _this_invocation(_read_events(logs.events), started)
    origin = next((e["time"] for e in events if e["type"] == "job_started"), started or 0.0)
    for event in events:
        event["t"] = round(event["time"] - origin, 3)
    attempts = _read_attempts(logs.processed, origin) if events or not started else []
    return RunRecords(run_dir, logs, summary, origin, attempts, events)


def _read_events(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:  # a driver killed mid-line
            continue
    return events


def _this_invocation(events: list[dict[str, Any]], started: float | None) -> list[dict[str, Any]]:
    """The events since this invocation's driver started: a `job_started` that does not follow a
    `restart` (a restart goes on in the same invocation) begins a new one. None when the newest
    began before this invocation did (e.g. nothing ran because every mini-batch was reused)."""
    begin = None
    for i, event in enumerate(events):
        if event.get("type") == "job_started" and (i == 0 or events[i - 1].get("type") != "restart"):
            begin = i
    if begin is None or (started is not None and events[begin]["time"] < started):
        return []
    return events[begin:]


def _read_attempts(path: Path, origin: float) -> list[Attempt]:
    """Attempts that started in this invocation (the file also holds earlier invocations' rows)."""
    try:
        file = open(path, newline="", encoding="utf-8")
    except OSError:
        return []
    with file:
        reader = csv.reader(file)
        column = {name: i for i, name in enumerate(next(reader, []))}
        if "start_time" not in column:
            return []  # written before attempts had a start time; the timeline cannot be drawn
        index = [
            column[name]
            for name in (
                "mini_batch_id",
                "attempt",
                "node_id",
                "process_name",
                "pid",
                "items",
                "items_succeeded",
                "outcome",
                "start_time",
                "duration_s",
                "error",
            )
        ]
        attempts = []
        for row in reader:
            try:
                mb, attempt, node, process, pid, items, ok, outcome, start, duration, error = (row[i] for i in index)
                start_s = float(start) - origin
            except (IndexError, ValueError):
                continue
            if start_s < 0:
                continue
            attempts.append(
                Attempt(
                    int(mb),
                    int(attempt),
                    f"{node}/{process}",
                    to_int(pid),
                    to_int(items),
                    to_int(ok),
                    outcome,
                    round(start_s, 3),
                    float(duration),
                    error,
                )
            )
    attempts.sort(key=lambda a: a.start)
    return attempts


def read_samples(path: Path, since: float, origin: float) -> list[dict[str, Any]]:
    try:
        with open(path, newline="", encoding="utf-8") as file:
            rows = list(csv.DictReader(file))
    except OSError:
        return []
    samples = []
    for row in rows:
        when = to_float(row.get("time_unix")) or unix(row.get("time"))
        if when is None or when < since:
            continue
        sample: dict[str, Any] = {"t": round(when - origin, 3), "process_name": row.get("process_name")}
        for key in ("cpu_percent", "memory_percent", "memory_used_mb", "rss_mb"):
            sample[key] = to_float(row.get(key))
        samples.append(sample)
    return samples


def natural(name: str) -> list[int | str]:
    """node2/process010 before node10/process002."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def unix(stamp: Any) -> float | None:
    """Unix seconds of a `YYYY-MM-DD HH:MM:SS` local time (how the run's summary and samples write it)."""
    if not stamp:
        return None
    try:
        return time.mktime(time.strptime(str(stamp), _TIME_FORMAT))
    except ValueError:
        return None


def to_int(text: str) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def to_float(text: Any) -> float | None:
    """A finite number, or None (the page's JSON has no NaN)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
