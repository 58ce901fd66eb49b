"""The log layout of a run directory, the one ParallelRunStep users know (DESIGN.md section 4).

Workers write their own files (stdout, stderr, entry script log, errors, one line
per mini-batch); the driver writes the job-level files here. Nothing is fsynced:
logs are for people, the ledger is for recovery.
"""

from __future__ import annotations

import csv
import functools
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

#: `started` is for people (to the second); `start_time` is the same instant in Unix seconds (timelines).
PROCESSED_COLUMNS = [
    "mini_batch_id",
    "attempt",
    "node_id",
    "process_name",
    "pid",
    "items",
    "items_succeeded",
    "items_failed",
    "outcome",
    "started",
    "duration_s",
    "error",
    "start_time",
]


@dataclass(frozen=True)
class WorkerLogPaths:
    """The files of one worker process (`processNNN` on a node)."""

    stdout: Path
    stderr: Path
    entry_script_log: Path
    error: Path
    mini_batches: Path
    profile: Path


class RunLogs:
    """The `logs/` folder of one run."""

    def __init__(self, run_dir: Path):
        self.root = Path(run_dir) / "logs"
        self.master_role = self.root / "sys" / "master_role.txt"
        self.progress_overview = self.root / "job_progress_overview.txt"
        self.job_result = self.root / "job_result.txt"
        self.processed = self.root / "sys" / "job_report" / "processed_mini-batches.csv"
        self.events = self.root / "sys" / "events.jsonl"
        self.error_summary = self.root / "user" / "error.txt"
        for folder in (self.master_role.parent, self.processed.parent, self.error_summary.parent):
            folder.mkdir(parents=True, exist_ok=True)
        self._processed_file = None
        self._processed_writer = None
        self._events_file = None
        self._master_handler: logging.Handler | None = None

    def worker(self, node_id: str, process_name: str) -> WorkerLogPaths:
        user, sys = self.root / "user", self.root / "sys" / "node" / node_id
        paths = WorkerLogPaths(
            stdout=user / "stdout" / node_id / f"{process_name}.stdout.txt",
            stderr=user / "stderr" / node_id / f"{process_name}.stderr.txt",
            entry_script_log=user / "entry_script_log" / node_id / f"{process_name}.log.txt",
            error=user / "error" / node_id / f"{process_name}.txt",
            mini_batches=sys / f"{process_name}.txt",
            profile=sys / f"{process_name}.profile",
        )
        for path in (paths.stdout, paths.stderr, paths.entry_script_log, paths.error, paths.mini_batches):
            path.parent.mkdir(parents=True, exist_ok=True)
        return paths

    def perf_dir(self, node_id: str) -> Path:
        return self.root / "perf" / node_id

    # The driver's files ---------------------------------------------------------------

    def master_logger(self, run_id: str) -> logging.Logger:
        """The driver's log (`sys/master_role.txt`), a child of `parallel_steps` so hosts see it too."""
        logger = logging.getLogger(f"parallel_steps.run.{run_id}")
        logger.setLevel(logging.INFO)
        self._master_handler = logging.FileHandler(self.master_role, encoding="utf-8")
        self._master_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(self._master_handler)
        return logger

    def record_attempt(self, row: list) -> None:
        """One row of processed_mini-batches.csv, values in PROCESSED_COLUMNS order (buffered)."""
        if self._processed_writer is None:
            new = not self.processed.exists()
            self._processed_file = open(self.processed, "a", newline="", encoding="utf-8")
            self._processed_writer = csv.writer(self._processed_file)
            if new:
                self._processed_writer.writerow(PROCESSED_COLUMNS)
        self._processed_writer.writerow(row)

    def record_event(self, event: dict) -> None:
        """One line of events.jsonl: a job event (worker started or replaced, failures, restarts, the end)."""
        if self._events_file is None:
            self._events_file = open(self.events, "a", encoding="utf-8")
        self._events_file.write(json.dumps(event, default=str) + "\n")

    def flush(self) -> None:
        for file in (self._processed_file, self._events_file):
            if file:
                file.flush()

    def write_progress(self, text: str) -> None:
        _write_atomic(self.progress_overview, text)

    def write_result(self, text: str) -> None:
        _write_atomic(self.job_result, text)

    def write_error_summary(self, text: str) -> None:
        _write_atomic(self.error_summary, text)

    def close(self, logger: logging.Logger | None = None) -> None:
        if self._processed_file:
            self._processed_file.close()
            self._processed_file = self._processed_writer = None
        if self._events_file:
            self._events_file.close()
            self._events_file = None
        if logger and self._master_handler:
            logger.removeHandler(self._master_handler)
            self._master_handler.close()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def timestamp(when: float | None = None) -> str:
    return _timestamp_of_second(int(when if when is not None else time.time()))


@functools.lru_cache(maxsize=4)
def _timestamp_of_second(second: int) -> str:
    """Formatting a time costs more than the rest of a mini-batch's log row; a second has one text."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))


def _tail(path: Path, size: int) -> str:
    """The last `size` bytes of a file as text; empty when it cannot be read."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, file.seek(0, 2) - size))
            return file.read().decode("utf-8", "replace")
    except OSError:
        return ""


def stderr_tail(paths: WorkerLogPaths, lines: int = 5) -> str:
    """The last lines a worker wrote to stderr, as `: line | line`, for the message of its loss."""
    tail = _tail(paths.stderr, 4096).strip().splitlines()[-lines:]
    return (": " + " | ".join(tail)) if tail else ""


def hang_summary(error_log: Path) -> str:
    """Where a hung worker was, from the faulthandler dump at the end of its error log: the frame of
    the entry script in the thread that ran it, and the innermost one, e.g.
    `; hung at score.py line 12 in run (innermost: threading.py line 327 in wait)`."""
    dump = _tail(error_log, 65536).rsplit("stacks of every thread:", 1)[-1]
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump):
        frames = [
            (os.path.basename(p), line, name)
            for p, line, name in re.findall(r'File "([^"]+)", line (\d+) in (\S+)', block)
        ]
        calls = [i for i, (path, _, name) in enumerate(frames) if name == "_call" and path == "runtime.py"]
        if calls and calls[0] > 0:
            user, innermost = frames[calls[0] - 1], frames[0]
            where = "{} line {} in {}".format(*user)
            if innermost != user:
                where += " (innermost: {} line {} in {})".format(*innermost)
            return f"; hung at {where}"
    return ""
