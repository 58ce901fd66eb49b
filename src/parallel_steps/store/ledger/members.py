"""The plan's member files in the ledger: every file mini-batch's files, in plan order, kept once.

A file mini-batch's files are a slice of the concatenation of every file mini-batch's files in
plan order, so its row names only where its slice begins (`first`; its `items` files follow).
The concatenation is kept in runs (`members` table): each run's paths NUL-joined and
compressed (zlib, level 1: sorted paths share most of their text, a run of listed paths
takes a few bytes per path). Writing costs a list extend per mini-batch and one compression
per commit; reading walks the runs in order (a sticky rerun, `status`), or finds the run a
slice begins in (the description of one mini-batch).
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterator, Sequence

# A run is written once it holds this many paths (and at every commit). Reading one mini-batch's files
# decompresses its whole run (the report describes its 20 slowest: 20 runs), while zlib's 32 KB window
# gains nothing from longer runs: 10,000 cost the report 0.04-0.07 s more at 20,000 mini-batches, for a
# ledger 1% smaller.
_RUN_PATHS = 2_500

MEMBERS_SCHEMA = "CREATE TABLE IF NOT EXISTS members (first INTEGER PRIMARY KEY, paths BLOB NOT NULL);"


def _pack(paths: Sequence[str]) -> bytes:
    return zlib.compress("\0".join(paths).encode("utf-8", "surrogateescape"), 1)


def _unpack(blob: bytes) -> list[str]:
    return zlib.decompress(blob).decode("utf-8", "surrogateescape").split("\0")


class MemberWriter:
    """Places each file mini-batch's files at the end of the concatenation; writes them in runs."""

    def __init__(self, db: sqlite3.Connection):
        self._db = db
        self._placed = 0  # paths placed so far: where the next mini-batch's files begin
        self._unwritten: list[str] = []
        self.reload()

    def reload(self) -> None:
        """Go on after what the ledger holds (an empty plan, a rollback, a ledger opened again)."""
        self._unwritten = []
        last = self._db.execute("SELECT first, paths FROM members ORDER BY first DESC LIMIT 1").fetchone()
        self._placed = last[0] + len(_unpack(last[1])) if last else 0

    def place(self, paths: Sequence[str]) -> int:
        """Where these files begin in the concatenation (they are written with the next `write`)."""
        first = self._placed
        self._placed += len(paths)
        self._unwritten += paths
        if len(self._unwritten) >= _RUN_PATHS:
            self.write()
        return first

    def write(self) -> None:
        """The placed paths not yet written, as one run (inside the caller's transaction)."""
        if self._unwritten:
            first = self._placed - len(self._unwritten)
            self._db.execute("INSERT INTO members VALUES (?, ?)", (first, _pack(self._unwritten)))
            self._unwritten = []

    def clear(self) -> None:
        self._db.execute("DELETE FROM members")
        self._unwritten, self._placed = [], 0


class MemberReader:
    """Slices of the concatenation, read run by run: sequentially (in plan order) or from anywhere."""

    def __init__(self, db: sqlite3.Connection):
        self._db = db
        self._start = 0  # the position of self._paths[0]
        self._paths: list[str] = []

    def slice(self, first: int, count: int) -> list[str]:
        """The `count` paths from position `first`; empty where the ledger lacks them."""
        end = first + count
        if not self._start <= first < self._start + len(self._paths) or end > self._start + len(self._paths):
            self._load(first, end)
        return self._paths[first - self._start : end - self._start]

    def _load(self, first: int, end: int) -> None:
        """Hold the runs from the one `first` lies in up to the one `end` lies in."""
        runs = self._db.execute(
            "SELECT first, paths FROM members WHERE first >= coalesce("
            "(SELECT max(first) FROM members WHERE first <= ?), 0) AND first < ? ORDER BY first",
            (first, end),
        ).fetchall()
        self._start, self._paths = (runs[0][0], []) if runs else (first, [])
        for run_first, blob in runs:
            if run_first != self._start + len(self._paths):  # a gap: what follows is not contiguous
                break
            self._paths += _unpack(blob)


def iter_members(db: sqlite3.Connection, rows: Iterator[tuple[int, int]]) -> Iterator[list[str]]:
    """The files of each (first, count) of `rows`, in the order given (cheapest in plan order)."""
    reader = MemberReader(db)
    for first, count in rows:
        yield reader.slice(first, count)
