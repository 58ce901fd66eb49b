"""A write the disk refuses, under the run directory or the output: told in one line, never retried, never a
traceback.

A full disk (or quota), an I/O error, a read-only folder or one without permission: restarting the
driver cannot change any of them, so a run that meets one ends Failed with `write_failed_line`, which
names the path, the cause and what to do; the records written after that (the ledger's status, logs,
run.json, the report) are written where they still can be (`where_it_fits`). SQLite keeps the ledger
whole on its own: a commit it cannot write rolls back, so what the ledger committed stands for the rerun.
A worker's spool stops the run the same way (`refused_write` carries its error to the driver).

Every place a run writes calls `write_site(name, path)` just before it writes: `WRITE_SITES` lists them, and
the fault matrix (tests/core/test_write_faults.py) fails each in turn through the failpoint
`PARALLEL_STEPS_FAULT=<site>:<ERRNO>[:<nth>]` (e.g. `run_index:ENOSPC:4`): from that site's nth write on
(default the first), in every process of the run, the site raises `OSError(ERRNO, strerror, path)`, as a disk
that is full, failing or read-only would, until the variable is gone. Read once, at import: unset, a site
costs one comparison.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from ..errors import WriteRefused

_FREE = "free some space there"
_WRITABLE = "make it writable, or choose another folder"
#: What each refused write is, and what to do about it.
_CAUSES = {
    errno.ENOSPC: ("no space left on the device", _FREE),
    errno.EDQUOT: ("over the disk quota", _FREE),
    errno.EIO: ("an I/O error", "check the disk (the system log says more)"),
    errno.EROFS: ("a read-only file system", _WRITABLE),
    errno.EACCES: ("permission denied", _WRITABLE),
    errno.EPERM: ("not permitted", _WRITABLE),
}
#: SQLite's primary result codes for the same causes.
_SQLITE_CAUSES = {13: errno.ENOSPC, 10: errno.EIO, 8: errno.EROFS, 3: errno.EACCES}  # FULL, IOERR, READONLY, PERM


#: Every write site of a run: name -> what is written there. A new site needs a name here, a case in
#: tests/core/test_write_faults.py and a row in docs/reliability.md ("Where a run writes"): a test checks all three.
WRITE_SITES = {
    "run_index": "<run root>/index.sqlite: the run's row (opened, registered, keyed, ended, mended)",
    "key_lock": "<run root>/locks/<key>.lock: the lock of a step on its inputs",
    "driver_lock": "<run>/driver.lock: the run's one driver, named",
    "ledger": "<run>/ledger.sqlite: the plan and every outcome, at each commit",
    "spool": "<run>/parts/<worker>.*: a worker's result slices (in the worker)",
    "driver_logs": "<run>/logs/sys/: processed_mini-batches.csv and events.jsonl, at each flush",
    "progress": "<run>/logs/job_progress_overview.txt and logs/sys/job_report/progress.json",
    "error_summary": "<run>/logs/user/error.txt: the distinct script errors",
    "run_summary": "<run>/run.json: the run's summary (when it starts and ends)",
    "report": "<run>/logs/report.html",
    "job_result": "<run>/logs/job_result.txt",
    "output": "the output file, assembled from the spools (append_row); a step over partitions: each one's",
    "upload": "the output folder, copied to an output URL",
    "side_input_copy": "$TMPDIR/parallel_steps/side_inputs/: a copy of a side input named by a URL (in the worker)",
    "detached": "<run>/step.json, entry_callables.pkl, driver.log: a detached run's configuration and log",
    "ray_job": "<run>/driver_secrets.json, ray_job.json: what a Ray job's driver is handed, and the job's id",
    "pipeline": "<pipeline run>/pipeline.json: a pipeline run's record (its jobs' states), at each change",
}


def _failpoint(text: str | None) -> tuple[str, int, int] | None:
    """(site, errno, nth) from `PARALLEL_STEPS_FAULT`; None when unset. A value that names no site or no errno
    stops at once: a fault test that injects nothing would pass for the wrong reason."""
    if not text:
        return None
    site, name, nth = [*text.split(":"), "1", ""][:3]
    code = getattr(errno, name, None)
    if site not in WRITE_SITES or not isinstance(code, int) or not nth.isdigit():
        raise ValueError(f"PARALLEL_STEPS_FAULT={text}: not <site>:<ERRNO>[:<nth>] with a site of {list(WRITE_SITES)}")
    return site, code, int(nth)


_FAULT = _failpoint(os.environ.get("PARALLEL_STEPS_FAULT"))
_hits: collections.Counter[str] = collections.Counter()


def write_site(name: str, path: str | os.PathLike[str]) -> None:
    """Called just before a run writes at site `name` (one of `WRITE_SITES`) to `path`: raises the failpoint's
    error there, from its nth write on; else nothing."""
    if _FAULT is None or _FAULT[0] != name:
        return
    _hits[name] += 1
    if _hits[name] >= _FAULT[2]:
        raise OSError(_FAULT[1], os.strerror(_FAULT[1]), str(path))


def cannot_write(exc: BaseException) -> bool:
    """Whether `exc` is a write the disk refused (full, I/O error, read-only, no permission): OSError or SQLite's."""
    return _errno_of(exc) is not None


def _errno_of(exc: BaseException) -> int | None:
    if isinstance(exc, OSError):
        return exc.errno if exc.errno in _CAUSES else None
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is not None and isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return _SQLITE_CAUSES.get(code & 0xFF) if code is not None else None
    return None


def refused_write(code: int, path: str) -> OSError:
    """The refused write another process met (a worker writing its spool: `code` its errno), raised where the run
    stops."""
    return OSError(code, os.strerror(code), path)


def write_failed_line(exc: BaseException, run_dir: Path) -> str:
    """`<path>: <cause> (<what to do>, then rerun ...)`: the file the error names, else the run directory."""
    path = getattr(exc, "filename", None) or run_dir
    remedy = _CAUSES[_errno_of(exc) or errno.ENOSPC][1]
    return f"{path}: {write_cause(exc)} ({remedy}, then rerun the step in the same run directory: it resumes)"


def write_cause(exc: BaseException) -> str:
    """Why the disk refused the write, in words (`no space left on the device`, `a read-only file system`)."""
    return _CAUSES[_errno_of(exc) or errno.ENOSPC][0]


@contextlib.contextmanager
def refusals_told(run_root: Path) -> Iterator[None]:
    """A write the disk refuses in the block, raised as `WriteRefused` whose message is its one line: what every
    front end shows of a refusal that came before the run had a summary (a later one ends the run Failed)."""
    try:
        yield
    except Exception as exc:
        if not cannot_write(exc):
            raise
        raise WriteRefused(write_failed_line(exc, run_root)) from None


@contextlib.contextmanager
def where_it_fits() -> Iterator[None]:
    """Write records that may no longer be written: a refused write skips the rest of the block, any other error
    raises."""
    try:
        yield
    except Exception as exc:
        if not cannot_write(exc):
            raise
