"""A write the disk refuses, in one line: which errors are such (full, quota, I/O error, read-only, no
permission; OSError or SQLite's), and what the line says of each: the path, the cause, what to do. And the
fault matrix's seam: `write_site` and the failpoint `PARALLEL_STEPS_FAULT` it reads."""

import errno
import os
import sqlite3
from pathlib import Path

import pytest

from parallel_steps.store import space
from parallel_steps.store.space import cannot_write, write_cause, write_failed_line, write_site

RUN_DIR = Path("/runs/r1")


@pytest.mark.parametrize(
    ("code", "cause", "remedy"),
    [
        (errno.ENOSPC, "no space left on the device", "free some space there"),
        (errno.EDQUOT, "over the disk quota", "free some space there"),
        (errno.EIO, "an I/O error", "check the disk"),
        (errno.EROFS, "a read-only file system", "make it writable, or choose another folder"),
        (errno.EACCES, "permission denied", "make it writable, or choose another folder"),
    ],
)
def test_each_refused_write_names_the_path_its_cause_and_what_to_do(code, cause, remedy):
    exc = OSError(code, os.strerror(code), "/out/result.txt")
    assert cannot_write(exc)
    line = write_failed_line(exc, RUN_DIR)
    assert line.startswith(f"/out/result.txt: {cause} ({remedy}")
    assert line.endswith("then rerun the step in the same run directory: it resumes)")
    assert write_cause(exc) == cause


def test_sqlite_errors_are_told_by_their_primary_code():
    full, io_error = sqlite3.OperationalError("database or disk is full"), sqlite3.OperationalError("disk I/O error")
    full.sqlite_errorcode, io_error.sqlite_errorcode = 13, 10 | (3 << 8)  # SQLITE_FULL; SQLITE_IOERR_WRITE
    assert (cannot_write(full), write_cause(full)) == (True, "no space left on the device")
    assert (cannot_write(io_error), write_cause(io_error)) == (True, "an I/O error")
    assert write_failed_line(io_error, RUN_DIR).startswith("/runs/r1: an I/O error")  # SQLite names no file


def test_other_errors_are_not_refused_writes():
    assert not cannot_write(OSError(errno.ENOENT, "No such file or directory", "/x"))
    assert not cannot_write(ValueError("bad value"))


@pytest.fixture
def failpoint(monkeypatch):
    """`failpoint(text)`: the seam as if PARALLEL_STEPS_FAULT=text had been set when it was imported."""

    def set_to(text: str | None) -> None:
        monkeypatch.setattr(space, "_FAULT", space._failpoint(text))
        monkeypatch.setattr(space, "_hits", space.collections.Counter())

    return set_to


def test_a_site_refuses_from_its_nth_write_on_and_other_sites_write(failpoint):
    failpoint("ledger:EIO:2")
    write_site("ledger", "/runs/r1/ledger.sqlite")  # the first write goes through
    write_site("spool", "/runs/r1/parts/p")
    for _ in range(2):  # the second and every one after: a disk does not mend itself
        with pytest.raises(OSError) as refused:
            write_site("ledger", "/runs/r1/ledger.sqlite")
        assert (refused.value.errno, refused.value.filename) == (errno.EIO, "/runs/r1/ledger.sqlite")
        assert write_failed_line(refused.value, RUN_DIR).startswith("/runs/r1/ledger.sqlite: an I/O error (")


def test_without_the_variable_no_site_refuses(failpoint):
    failpoint(None)
    for site in space.WRITE_SITES:
        write_site(site, "/x")


@pytest.mark.parametrize("text", ["ledgr:ENOSPC", "ledger:ENOSPACE", "ledger:EIO:first", "ledger"])
def test_a_failpoint_naming_no_site_or_no_errno_stops_at_once(text):
    with pytest.raises(ValueError, match="PARALLEL_STEPS_FAULT="):
        space._failpoint(text)
