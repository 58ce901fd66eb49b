"""A write the disk refuses, under the run directory or the output: told in one line, never retried, never a
traceback.

A full disk (or quota), an I/O error, a read-only folder or one without permission: restarting the
driver cannot change any of them, so a run that meets one ends Failed with `write_failed_line`, which
names the path, the cause and what to do; the records written after that (the ledger's status, logs,
run.json, the report) are written where they still can be (`where_it_fits`). SQLite keeps the ledger
whole on its own: a commit it cannot write rolls back, so what the ledger committed stands for the rerun.
A worker's spool tells only a full disk apart (`out_of_space`); its other errors fail the attempt.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from pathlib import Path

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
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


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or the user's quota) is full: an OSError, or SQLite's SQLITE_FULL."""
    if isinstance(exc, OSError):
        return exc.errno in _FULL_ERRNOS
    sqlite3 = sys.modules.get("sqlite3")  # loaded wherever a SQLite error can be; a worker's own code does not load it
    if sqlite3 is not None and isinstance(exc, sqlite3.Error):
        return bool(getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL)
    return False


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


def disk_full(path: str) -> OSError:
    """The error of a full disk another process met (a worker writing its spool), raised where the run stops."""
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


def write_failed_line(exc: BaseException, run_dir: Path) -> str:
    """`<path>: <cause> (<what to do>, then rerun ...)`: the file the error names, else the run directory."""
    path = getattr(exc, "filename", None) or run_dir
    remedy = _CAUSES[_errno_of(exc) or errno.ENOSPC][1]
    return f"{path}: {write_cause(exc)} ({remedy}, then rerun the step in the same run directory: it resumes)"


def write_cause(exc: BaseException) -> str:
    """Why the disk refused the write, in words (`no space left on the device`, `a read-only file system`)."""
    return _CAUSES[_errno_of(exc) or errno.ENOSPC][0]


@contextlib.contextmanager
def where_it_fits() -> Iterator[None]:
    """Write records that may no longer be written: a refused write skips the rest of the block, any other error
    raises."""
    try:
        yield
    except Exception as exc:
        if not cannot_write(exc):
            raise
