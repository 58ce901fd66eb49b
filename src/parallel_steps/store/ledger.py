"""The run ledger (SQLite, WAL): the plan, each mini-batch's state and attempts, committed parts.

The driver is its only writer, and what it trusts after a crash: a mini-batch is
done exactly when its row says `succeeded` and names a part file. Writes are
committed in batches (every tenth of a second or so), so a killed driver loses at
most the results of its last moment: they run again when the run resumes.
A resume plans again, so rows are only ever added by the run that owns them.
The reads (rows, attempts, counts, parts, reusable results) are in `ledger_queries.py`.
"""

from __future__ import annotations

import pickle
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..inputs.members import encode_members, encode_tokens
from ..inputs.minibatch import MiniBatch
from .ledger_queries import LedgerQueries
from .output import Part

#: A planned mini-batch, the result it takes from a reuse source (or None), its files' tokens (or None).
PlanRow = tuple[MiniBatch, "dict[str, Any] | None", "list[str] | None"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS mini_batches (
    idx INTEGER PRIMARY KEY,
    fingerprint TEXT,                        -- NULL until the worker fingerprints what it read
    source TEXT NOT NULL,
    items INTEGER,
    nbytes INTEGER,
    descriptor BLOB,                         -- the pickled MiniBatch, when pending() is to read it
    members TEXT,                            -- file mini-batches: their files (inputs/incremental.py encoding)
    tokens BLOB,                             -- and each file's size and mtime (or hash), once known
    state TEXT NOT NULL DEFAULT 'pending',   -- pending | succeeded | failed
    attempts INTEGER NOT NULL DEFAULT 0,
    part TEXT,                               -- spool file, offset and length of the successful
    part_offset INTEGER,                     -- attempt's rows (see store/output.py)
    part_length INTEGER,
    returned INTEGER,                        -- elements run() returned
    items_failed INTEGER,
    reused_from TEXT,                        -- run id the result was taken from
    error TEXT,
    exit_code INTEGER,
    worker TEXT,
    duration REAL
);
CREATE TABLE IF NOT EXISTS attempts (                -- failed attempts (the successful one is in mini_batches)
    idx INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    worker TEXT,
    pid INTEGER,
    started REAL,
    ended REAL,
    outcome TEXT,                            -- succeeded | failed | crashed | timed_out | out_of_memory
    error TEXT,
    exit_code INTEGER
);
"""

_LAYOUT = 2  # PRAGMA user_version; a ledger of an older layout is rebuilt, and is no reuse source
_DAMAGED = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)  # what a truncated or overwritten file gives
_GO_ON = "rerun the step in a fresh run directory (--run-dir), or delete this one and rerun it"

_SUCCEED = (
    "UPDATE mini_batches SET state='succeeded', attempts=?, part=?, part_offset=?, part_length=?, returned=?,"
    " items_failed=?, items=coalesce(items, ?), worker=?, duration=?, error=NULL,"
    " fingerprint=coalesce(?, fingerprint), tokens=coalesce(?, tokens) WHERE idx=?"
)


class Ledger(LedgerQueries):
    """One run's ledger file: the writes (the reads are `LedgerQueries`'); `Ledger.open_readonly` for
    other runs (reuse, status)."""

    def __init__(self, path: str | Path, readonly: bool = False):
        self.path = Path(path)
        uri = f"file:{self.path}?mode=ro" if readonly else f"file:{self.path}"
        existed = self.path.is_file() and self.path.stat().st_size > 0
        self._db = sqlite3.connect(uri, uri=True, timeout=30, isolation_level="DEFERRED", check_same_thread=False)
        if not readonly:
            try:
                self._open_for_writing(existed)
            except sqlite3.DatabaseError as exc:
                self._db.close()
                if getattr(exc, "sqlite_errorcode", None) not in _DAMAGED:
                    raise
                raise InputError(str(self.path), f"is damaged ({exc}); {_GO_ON}") from None
            except InputError:
                self._db.close()
                raise
        self._successes: list[tuple[Any, ...]] = []  # written by commit(), many rows per statement
        self._closed = False

    def _open_for_writing(self, existed: bool) -> None:
        """WAL; a ledger that was there already checked whole and of a layout this version can read (an
        older one is rebuilt: nothing in it can be resumed; a newer one is refused, not wiped)."""
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        if existed and (found := self._db.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
            raise InputError(str(self.path), f"is damaged ({found}); {_GO_ON}")
        layout = self.layout()
        if layout > _LAYOUT:
            raise InputError(
                str(self.path),
                f"was written by a newer parallel-steps (ledger layout {layout}; this version reads {_LAYOUT}); "
                "rerun the step with that version, or in a fresh run directory",
            )
        if layout != _LAYOUT:
            self._db.executescript(
                "DROP TABLE IF EXISTS meta; DROP TABLE IF EXISTS mini_batches;"
                f" DROP TABLE IF EXISTS attempts; PRAGMA user_version={_LAYOUT};"
            )
        self._db.executescript(_SCHEMA)

    @classmethod
    def open_readonly(cls, path: str | Path) -> Ledger | None:
        """The ledger of another run, or None when there is none of this layout."""
        try:
            ledger = cls(path, readonly=True) if Path(path).exists() else None
            if ledger and ledger.layout() != _LAYOUT:
                ledger.close()
                return None
            return ledger
        except sqlite3.Error:
            return None

    def close(self) -> None:
        """Commit and close (once); closed also when the commit fails (a full disk: SQLite rolls it back)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.commit()
        finally:
            self._db.close()

    def commit(self) -> None:
        if self._successes:
            self._db.executemany(_SUCCEED, self._successes)
            self._successes = []
        self._db.commit()

    def rollback(self) -> None:
        self._successes = []
        self._db.rollback()

    # Meta ------------------------------------------------------------------

    def set(self, **values: Any) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, None if v is None else str(v)) for k, v in values.items()]
        )

    # The plan ------------------------------------------------------------------

    def clear_plan(self) -> None:
        self._db.execute("DELETE FROM mini_batches")

    def add(self, rows: Iterable[PlanRow], descriptors: bool = True) -> None:
        """Insert planned mini-batches; a reused result (part, returned, items_failed, run_id) marks it succeeded.
        File mini-batches keep their member files (and their tokens, when known) for the next plan.
        Without `descriptors` (the driver holds the mini-batches already) a row costs a fifth of the time."""
        pending, reused = [], []
        for mb, reuse, tokens in rows:
            descriptor = pickle.dumps(mb, protocol=pickle.HIGHEST_PROTOCOL) if descriptors else None
            members = encode_members(mb.paths) if mb.kind == "files" else None
            plan = (
                mb.index,
                mb.fingerprint,
                mb.describe(),
                mb.items,
                mb.nbytes,
                descriptor,
                members,
                encode_tokens(tokens) if tokens else None,
            )
            if reuse:
                part = reuse["part"] or (None, None, None)
                reused.append((*plan, *part, reuse["returned"], reuse["items_failed"], reuse["run_id"]))
            else:
                pending.append(plan)
        self._db.executemany(
            "INSERT INTO mini_batches (idx, fingerprint, source, items, nbytes, descriptor, members, tokens)"
            " VALUES (?,?,?,?,?,?,?,?)",
            pending,
        )
        self._db.executemany(
            "INSERT INTO mini_batches (idx, fingerprint, source, items, nbytes, descriptor, members, tokens, part,"
            " part_offset, part_length, returned, items_failed, reused_from, state)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,'succeeded')",
            reused,
        )

    # Outcomes -------------------------------------------------------------------

    def record_attempt(
        self,
        idx: int,
        attempt: int,
        worker: str,
        pid: int | None,
        started: float,
        outcome: str,
        error: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        self._db.execute(
            "INSERT INTO attempts VALUES (?,?,?,?,?,?,?,?,?)",
            (idx, attempt, worker, pid, started, time.time(), outcome, error, exit_code),
        )

    def succeed(
        self,
        idx: int,
        attempts: int,
        part: Part | None,
        returned: int,
        items_failed: int,
        items: int | None,
        worker: str,
        duration: float,
        fingerprint: str | None,
        tokens: bytes | None = None,
    ) -> None:
        """Written with the next `commit()`; `fingerprint` and `tokens` when the worker made them."""
        part_fields = part or (None, None, None)
        self._successes.append(
            (attempts, *part_fields, returned, items_failed, items, worker, duration, fingerprint, tokens, idx)
        )

    def fail(
        self,
        idx: int,
        attempts: int,
        error: str,
        exit_code: int | None,
        items: int | None,
        worker: str,
        duration: float,
    ) -> None:
        self._db.execute(
            "UPDATE mini_batches SET state='failed', attempts=?, error=?, exit_code=?,"
            " items=coalesce(items, ?), worker=?, duration=? WHERE idx=?",
            (attempts, error, exit_code, items, worker, duration, idx),
        )
