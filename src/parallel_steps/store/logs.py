"""The log layout of a run directory, the one ParallelRunStep users know (DESIGN.md section 4).

The one owner of every log path and of every line another module reads back:
workers write their own files (stdout, stderr, entry script log, error sections,
one journal line per mini-batch) with the functions here; the driver writes the
job-level files; `parallel-steps logs` reads them back with the same formats.
Nothing is fsynced: logs are for people, the ledger is for recovery.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..masking import URL_MASKING
from ..protocol import WorkerInfo
from ..protocol import WorkerLogPaths as WorkerLogPaths  # carried to workers; laid out here
from ..summary import timestamp
from .attempts import AttemptLog
from .space import write_site

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
_HANG_DUMP = "stacks of every thread:"  # ends the header of a section a faulthandler dump follows
_SECTION = "--- "  # starts every section of a worker's error log
_POLL_S = 0.5


class RunLogs:
    """The `logs/` folder of one run: where everything is, and the driver's writers."""

    def __init__(self, run_dir: Path, create: bool = True):
        self.run_dir = Path(run_dir)
        self.root = self.run_dir / "logs"
        self.master_role = self.root / "sys" / "master_role.txt"
        self.progress_overview = self.root / "job_progress_overview.txt"
        self.progress_snapshot = self.root / "sys" / "job_report" / "progress.json"  # the same, for readers
        self.job_result = self.root / "job_result.txt"
        self.processed = self.root / "sys" / "job_report" / "processed_mini-batches.csv"
        self.events = self.root / "sys" / "events.jsonl"
        self.error_summary = self.root / "user" / "error.txt"
        self.error_dir = self.root / "user" / "error"  # <node>/processNNN.txt: tracebacks and stack dumps
        if create:
            for folder in (self.master_role.parent, self.processed.parent, self.error_summary.parent):
                folder.mkdir(parents=True, exist_ok=True)
        self._processed_file: Any = None
        self._processed_writer: Any = None
        self.attempts = AttemptLog()  # this invocation's, as written to `processed` (for its report)
        self._events_file: Any = None
        self._master_handler: logging.Handler | None = None

    def worker(self, node_id: str, process_name: str, create: bool = True) -> WorkerLogPaths:
        user, sys = self.root / "user", self.root / "sys" / "node" / node_id
        paths = WorkerLogPaths(
            stdout=user / "stdout" / node_id / f"{process_name}.stdout.txt",
            stderr=user / "stderr" / node_id / f"{process_name}.stderr.txt",
            entry_script_log=user / "entry_script_log" / node_id / f"{process_name}.log.txt",
            error=self.error_dir / node_id / f"{process_name}.txt",
            mini_batches=sys / f"{process_name}.txt",
            profile=sys / f"{process_name}.profile",
            metrics=user / "metrics" / node_id / f"{process_name}.jsonl",
        )
        if create:
            for path in (paths.stdout, paths.stderr, paths.entry_script_log, paths.error, paths.mini_batches):
                path.parent.mkdir(parents=True, exist_ok=True)
        return paths

    def count_metrics(self) -> int:
        """The metrics every worker logged, one JSON line each (the summary's `metrics_logged`)."""
        total = 0
        for path in (self.root / "user" / "metrics").glob("*/*.jsonl"):
            with open(path, "rb") as file:
                total += sum(1 for _ in file)
        return total

    def relative(self, path: Path) -> str:
        """A path as shown to people: relative to the run directory (`logs/user/error/...`)."""
        return str(path.relative_to(self.run_dir))

    def perf_dir(self, node_id: str) -> Path:
        return self.root / "perf" / node_id

    def _where_to_look(self) -> list[str]:
        """The files to open after a failure, for job_result.txt."""
        errors = self.error_dir / "<node>" / "processNNN.txt"
        return [
            f"  {self.error_summary}             distinct script errors, with counts",
            f"  {errors}   full tracebacks and hang stack dumps",
            f"  {self.master_role}         the driver's view: retries, failures",
        ]

    # The driver's files ---------------------------------------------------------------

    def master_logger(self, run_id: str) -> logging.Logger:
        """The driver's log (`sys/master_role.txt`), a child of `parallel_steps` so hosts see it too."""
        logger = logging.getLogger(f"parallel_steps.run.{run_id}")
        logger.setLevel(logging.INFO)
        logger.addFilter(URL_MASKING)  # URLs' passwords and query strings, in every line
        self._master_handler = _QuietFileHandler(self.master_role, encoding="utf-8")
        self._master_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(self._master_handler)
        return logger

    def record_attempt(
        self,
        mini_batch: int,
        attempt: int,
        worker: WorkerInfo,
        items: int | None,
        succeeded: int | None,
        failed: int | None,
        outcome: str,
        started: float,
        duration: float,
        error: str = "",
    ) -> None:
        """One row of processed_mini-batches.csv (buffered), and the same attempt in `attempts`."""
        if self._processed_writer is None:
            new = not self.processed.exists()
            self._processed_file = open(self.processed, "a", newline="", encoding="utf-8")
            self._processed_writer = csv.writer(self._processed_file)
            if new:
                self._processed_writer.writerow(PROCESSED_COLUMNS)
        started_ms, duration_ms = f"{started:.3f}", f"{duration:.3f}"
        self._processed_writer.writerow(
            [
                mini_batch,
                attempt,
                worker.node_id,
                worker.process_name,
                worker.pid,
                items,
                succeeded,
                failed,
                outcome,
                timestamp(started),
                duration_ms,
                error,
                started_ms,
            ]
        )
        # The times as the file reads them back (parsing the text is quicker than rounding the float)
        self.attempts.append(
            mini_batch, attempt, worker.id, items, succeeded, outcome, float(started_ms), float(duration_ms), error
        )

    def record_event(self, event: dict[str, Any]) -> None:
        """One line of events.jsonl: a job event (worker started or replaced, failures, restarts, the end)."""
        if self._events_file is None:
            self._events_file = open(self.events, "a", encoding="utf-8")
        self._events_file.write(json.dumps(event, default=str) + "\n")

    def flush(self) -> None:
        write_site("driver_logs", self.processed)
        for file in (self._processed_file, self._events_file):
            if file:
                file.flush()

    def write_progress(self, text: str, snapshot: Mapping[str, Any]) -> None:
        """The progress overview for people, and the snapshot it is made of for `status` from another process."""
        write_site("progress", self.progress_overview)
        _write_atomic(self.progress_overview, text)
        _write_atomic(self.progress_snapshot, json.dumps(snapshot, default=str))

    def read_progress(self) -> dict[str, Any]:
        """The latest progress snapshot of a running driver ({} before the first)."""
        try:
            snapshot: dict[str, Any] = json.loads(self.progress_snapshot.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return snapshot

    def write_result(self, summary: Mapping[str, Any]) -> None:
        """job_result.txt, as in ParallelRunStep: the status and its reason, then the output, or where to look."""
        lines = [f"Status: {summary['status']}", f"Reason: {summary['status_reason']}", ""]
        if summary["status"] == "Succeeded":
            lines.append(f"Output: {summary['output_file'] or summary['output']}")
        else:
            lines += [
                "Where to look:",
                *self._where_to_look(),
                "",
                "Rerun the same step to resume: finished mini-batches are reused, only the rest run again.",
            ]
        write_site("job_result", self.job_result)
        _write_atomic(self.job_result, "\n".join(lines) + "\n")

    def write_error_summary(self, text: str) -> None:
        write_site("error_summary", self.error_summary)
        _write_atomic(self.error_summary, text)

    def close(self, logger: logging.Logger | None = None) -> None:
        for file in (self._processed_file, self._events_file):
            if file:
                file.close()
        self._processed_file = self._processed_writer = self._events_file = None
        if logger and self._master_handler:
            logger.removeHandler(self._master_handler)
            self._master_handler.close()

    # Reading back -------------------------------------------------------------------------

    def follow(self, stderr: bool, follow: bool, ended: Callable[[], bool]) -> Iterator[str]:
        """The driver's log, or every worker's stderr; with `follow`, new lines until `ended()`."""
        files = sorted(self.root.glob("user/stderr/*/*.stderr.txt")) if stderr else [self.master_role]
        offsets = dict.fromkeys(files, 0)
        while True:
            done = ended() if follow else True
            for path in offsets:
                text, offsets[path] = _read_from(path, offsets[path])
                if text:
                    yield (f"==> {path.parent.name}/{path.name} <==\n" if len(files) > 1 else "") + text
            if done:
                return
            time.sleep(_POLL_S)

    def mini_batch_story(self, index: int, workers: Iterable[str], stderr: bool) -> Iterator[str]:
        """Journal lines and error sections about mini-batch `index` on the workers that ran it."""
        tags = re.compile(rf"mini_batch={index} |{re.escape(mini_batch_tag(index))}\b")
        for worker in sorted(workers):
            node, process = worker.split("/")
            paths = self.worker(node, process, create=False)
            for path, lines in (
                (paths.mini_batches, _lines(paths.mini_batches)),
                (paths.error, _sections(paths.error)),
            ):
                found = [line for line in lines if tags.search(line.split("\n", 1)[0])]
                if found:
                    yield f"==> {self.relative(path)} <==\n" + "".join(found)
            if stderr and paths.stderr.exists():
                yield f"==> {node}/{paths.stderr.name} <==\n{paths.stderr.read_text(errors='replace')}"


# What workers write, and what is read back ----------------------------------------------------


def mini_batch_tag(index: int) -> str:
    """How error sections and loss messages name a mini-batch (the story of one mini-batch finds them by it)."""
    return f"on mini-batch {index}"


def timed_out_detail(limit: float, mini_batch: int) -> str:
    """What a mini-batch past its run() timeout says, whoever ended it (the pool, or an async worker)."""
    return f"run() exceeded {limit:g} s {mini_batch_tag(mini_batch)}"


def journal_line(
    index: int,
    attempt: int,
    items: Any,
    succeeded: Any,
    failed: Any,
    ok: bool,
    started: float,
    duration: float,
    pid: int,
    input_s: float,
    read_during: int | None,
) -> str:
    """One line of a worker's journal (`logs/sys/node/<node>/processNNN.txt`): `input` is the part of `duration`
    spent waiting for the input; `read_ahead_during=K` says it was read while mini-batch K ran."""
    ahead = f" read_ahead_during={read_during}" if read_during is not None else ""
    return (
        f"{timestamp(started)} pid={pid} mini_batch={index} attempt={attempt} items={items}"
        f" succeeded={succeeded} failed={failed} {'ok' if ok else 'error'} duration={duration:.3f}s"
        f" input={input_s:.3f}s{ahead}\n"
    )


def error_section(title: str) -> str:
    """The header of one section of a worker's error log."""
    return f"{_SECTION}{timestamp()} {title}\n"


def note_error(paths: WorkerLogPaths, text: str) -> None:
    """Append a section header to a worker's error log (the pool's notes: hangs, kills)."""
    try:
        with open(paths.error, "a", encoding="utf-8") as log:
            log.write(error_section(text))
    except OSError:
        pass


def note_hang(paths: WorkerLogPaths, detail: str) -> None:
    """The header of a stack dump that follows (the worker's faulthandler writes it)."""
    note_error(paths, f"{detail}; {_HANG_DUMP}")


def failure_section(paths: WorkerLogPaths, mini_batch: int | None, attempt: int | None, limit: int) -> str | None:
    """The first section of a worker's error log about a failure: init() (`mini_batch` None), or the
    attempt of a mini-batch (its traceback, or the stack dump of its hang); at most `limit` characters.
    Read line by line, so a long log is read only up to it."""
    if mini_batch is None:
        header = re.compile(r"init\(\) failed")
    else:
        tag = re.escape(mini_batch_tag(mini_batch))
        header = re.compile(rf"{tag} attempt {attempt} failed|{tag}; ")
    found: list[str] = []
    size = 0
    try:
        with open(paths.error, encoding="utf-8", errors="replace") as file:
            for line in file:
                if line.startswith(_SECTION):
                    if found:
                        break
                    if header.search(line):
                        found.append(line)
                elif found:
                    found.append(line)
                    size += len(line)
                    if size > limit:
                        found.append("...\n")
                        break
    except OSError:
        return None
    return "".join(found).rstrip() or None


def stderr_tail(paths: WorkerLogPaths, lines: int = 5) -> str:
    """The last lines a worker wrote to stderr, as `: line | line`, for the message of its loss."""
    tail = _tail(paths.stderr, 4096).strip().splitlines()[-lines:]
    return (": " + " | ".join(tail)) if tail else ""


def hang_summary(error_log: Path) -> str:
    """Where a hung worker was, from the faulthandler dump at the end of its error log: the frame of
    the entry script in the thread that ran it, and the innermost one, e.g.
    `; hung at score.py line 12 in run (innermost: threading.py line 327 in wait)`. The entry
    script's frame is the one the worker runtime's `_call` called."""
    dump = _tail(error_log, 65536).rsplit(_HANG_DUMP, 1)[-1]
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


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _tail(path: Path, size: int) -> str:
    """The last `size` bytes of a file as text; empty when it cannot be read."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, file.seek(0, 2) - size))
            return file.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _read_from(path: Path, offset: int) -> tuple[str, int]:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            file.seek(offset)
            return file.read(), file.tell()
    except OSError:
        return "", offset


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines(keepends=True)
    except OSError:
        return []


def _sections(path: Path) -> list[str]:
    try:
        return [s for s in re.split(rf"(?m)^(?={_SECTION})", path.read_text(errors="replace")) if s]
    except OSError:
        return []


class _QuietFileHandler(logging.FileHandler):
    """The driver's log file: a line that cannot be written (a full disk) is lost, not printed with a
    traceback on the user's terminal; the run's end says what happened (store/space.py)."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass
