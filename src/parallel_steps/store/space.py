"""A full disk under the run directory or the output: told in one line, never retried, never a traceback.

Restarting the driver cannot make space, so a run that meets a full disk ends Failed with
`no_space_line`; the records written after that (the ledger's status, logs, run.json, the report)
are written where they still fit (`where_it_fits`). SQLite keeps the ledger whole on its own: a
commit that finds the disk full rolls back, so what the ledger committed stands for the rerun.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from pathlib import Path

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or the user's quota) is full: an OSError, or SQLite's SQLITE_FULL."""
    if isinstance(exc, OSError):
        return exc.errno in _FULL_ERRNOS
    sqlite3 = sys.modules.get("sqlite3")  # loaded wherever a SQLite error can be; a worker's own code does not load it
    if sqlite3 is not None and isinstance(exc, sqlite3.Error):
        return bool(getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL)
    return False


def disk_full(path: str) -> OSError:
    """The error of a full disk another process met (a worker writing its spool), raised where the run stops."""
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


def no_space_line(exc: BaseException, run_dir: Path) -> str:
    """`<path>: no space left on the device (...)`: the file the error names, else the run directory."""
    path = getattr(exc, "filename", None) or run_dir
    return (
        f"{path}: no space left on the device (free some space there, then rerun the step in the same "
        "run directory: it resumes)"
    )


@contextlib.contextmanager
def where_it_fits() -> Iterator[None]:
    """Write records that may no longer fit: a full disk skips the rest of the block, any other error raises."""
    try:
        yield
    except Exception as exc:
        if not out_of_space(exc):
            raise
