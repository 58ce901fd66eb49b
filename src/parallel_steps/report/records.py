"""What one run recorded, read back for its report: the summary, the attempts of this invocation
(`logs/sys/job_report/processed_mini-batches.csv`), its job events (`logs/sys/events.jsonl`),
the ledger's rows and the monitor's samples. Times are seconds since the driver of this
invocation started (its `job_started` event).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import operator
import re
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..config.secrets import mask_environment
from ..store.attempts import Attempts
from ..store.ledger import Ledger
from ..store.logs import RunLogs, WorkerLogPaths
from ..store.runs import read_summary

_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
_CHUNK = 10_000  # rows of processed_mini-batches.csv read and converted at a time


@dataclass
class RunRecords:
    """What this invocation of a run recorded (a resumed run folder holds earlier ones too)."""

    run_dir: Path
    logs: RunLogs
    summary: Mapping[str, Any]
    origin: float  # Unix time of 0 s: this invocation's job_started, else its start
    attempts: Attempts
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

    def reused_from(self) -> dict[str, int]:
        """Reused mini-batches by the run they were taken from (this run's own id: a resume)."""
        ledger = Ledger.open_readonly(self.run_dir / "ledger.sqlite")
        if ledger is None:
            return {}
        try:
            return ledger.reused_from()
        finally:
            ledger.close()

    @property
    def span(self) -> float:
        return float(max([0.0, *self.attempts.end, *(e["t"] for e in self.events)]))

    def last_attempts(self) -> dict[int, int]:
        """Each mini-batch's last attempt in this invocation: its outcome is the mini-batch's (so far)."""
        return dict(zip(self.attempts.mini_batch, self.attempts.attempt))  # in start order: the last one wins

    def worker_logs(self, worker: str, create: bool = True) -> WorkerLogPaths:
        """The log files of a worker as events and attempts name it (`node/process`)."""
        node_id, process_name = worker.split("/", 1)
        return self.logs.worker(node_id, process_name, create)

    def error_log(self, worker: str) -> Path:
        return self.worker_logs(worker).error

    def workers(self) -> list[str]:
        """One timeline row per worker process: those that ran an attempt, started or were replaced."""
        named = set(self.attempts.worker) | {e["worker"] for e in self.events if e.get("worker")}
        return sorted(named, key=natural)


def mask_config(config: dict[str, Any]) -> dict[str, Any]:
    """The effective config as shown to people (summaries hold it masked already; this page may be made from
    any run directory)."""
    return {**config, "environment_variables": mask_environment(config.get("environment_variables") or {})}


# Reading ------------------------------------------------------------------------------------------


def read_run(
    run_dir: str | Path, summary: Mapping[str, Any] | None = None, attempts: Attempts | None = None
) -> RunRecords:
    """The records of the run in `run_dir` (its latest invocation); `summary` defaults to run.json, and
    `attempts` (those its driver recorded, when it is the caller) to processed_mini-batches.csv's."""
    run_dir = Path(run_dir)
    summary = summary or read_summary(run_dir) or {}
    logs = RunLogs(run_dir, create=False)
    started = unix(summary.get("started_at"))
    events = _this_invocation(_read_events(logs.events), started)
    origin = next((e["time"] for e in events if e["type"] == "job_started"), started or 0.0)
    for event in events:
        event["t"] = round(event["time"] - origin, 3)
    if attempts is not None:
        attempts = _since(attempts, origin)
    else:
        attempts = _read_attempts(logs.processed, origin) if events or not started else Attempts()
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


def _read_attempts(path: Path, origin: float) -> Attempts:
    """Attempts that started in this invocation (the file also holds earlier invocations' rows).

    The file is read `_CHUNK` rows at a time, each chunk converted a column at a time, in C (an object per
    row was most of the report's time; all the rows' texts at once, most of a large run's driver memory). A
    row that is not whole or does not convert (a driver killed mid-line cuts one) is left out."""
    attempts = Attempts()
    try:
        with open(path, newline="", encoding="utf-8") as file:
            reader = csv.reader(file)
            column = {name: i for i, name in enumerate(next(reader, []))}
            if "start_time" not in column:
                return attempts  # written before attempts had a start time: no timeline
            while chunk := list(itertools.islice(reader, _CHUNK)):
                attempts.extend(_columns([row for row in chunk if len(row) == len(column)], column))
    except OSError:
        return Attempts()
    return _since(attempts, origin)


def _columns(rows: list[list[str]], column: dict[str, int]) -> Attempts:
    try:
        return _converted(rows, column)
    except ValueError:  # a malformed number: find its rows, one by one (rare)
        return _converted([row for row in rows if _well_formed(row, column)], column)


def _converted(rows: list[list[str]], column: dict[str, int]) -> Attempts:
    """The rows' columns, converted; times still Unix seconds. ValueError for a mini-batch, attempt or time
    that is not a number; item counts the driver did not know are None."""

    def texts(name: str) -> Iterator[str]:
        return map(operator.itemgetter(column[name]), rows)

    return Attempts(
        mini_batch=list(map(int, texts("mini_batch_id"))),
        attempt=list(map(int, texts("attempt"))),
        worker=list(map(sys.intern, map("/".join, zip(texts("node_id"), texts("process_name"))))),
        items=_counts(list(texts("items"))),
        items_succeeded=_counts(list(texts("items_succeeded"))),
        outcome=list(map(sys.intern, texts("outcome"))),
        start=list(map(float, texts("start_time"))),
        duration=list(map(float, texts("duration_s"))),
        error=list(texts("error")),
    )


def _well_formed(row: list[str], column: dict[str, int]) -> bool:
    """Whether the numbers a row cannot do without are numbers (its other fields never fail to convert)."""
    try:
        int(row[column["mini_batch_id"]])
        int(row[column["attempt"]])
        float(row[column["start_time"]])
        float(row[column["duration_s"]])
    except ValueError:
        return False
    return True


def _counts(texts: list[str]) -> list[int | None]:
    try:
        return list(map(int, texts))
    except ValueError:  # some not known (empty)
        return list(map(to_int, texts))


def _since(attempts: Attempts, origin: float) -> Attempts:
    """The attempts that started at `origin` or later, in start order, times relative to it (to the ms)."""
    relative = list(map(operator.sub, attempts.start, itertools.repeat(origin)))
    start = list(map(round, relative, itertools.repeat(3)))
    kept = sorted((i for i, t in enumerate(relative) if t >= 0), key=start.__getitem__)
    return replace(attempts, start=start).select(kept)


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
