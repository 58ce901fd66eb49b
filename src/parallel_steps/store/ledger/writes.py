"""The run ledger (SQLite, WAL): the plan, each mini-batch's state and attempts, committed parts.

The driver is its only writer, and what it trusts after a crash: a mini-batch is
done exactly when its row says succeeded and names a part of a spool file. Writes are
committed in batches (every tenth of a second or so), so a killed driver loses at
most the results of its last moment: they run again when the run resumes.
A resume plans again, so rows are only ever added by the run that owns them.
The reads (rows, attempts, counts, parts, reusable results) are in `queries.py`.

Compact, because a run of a million files keeps a hundred thousand rows: file mini-batches
name their files by their place in the plan's member files (`members.py`), each file's
token is kept as a 4-byte check (`inputs/members.py`), fingerprints as their 20 bytes, states
as small numbers, and spool files, workers and earlier runs as ids of the `names` table.
"""

from __future__ import annotations

import pickle
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...inputs.members import EarlierBatch
from ...inputs.minibatch import MiniBatch
from ..output import Part
from ..space import write_site
from .members import MEMBERS_SCHEMA, MemberWriter
from .queries import FAILED, PLAN_COMPLETE, SUCCEEDED, LedgerQueries, fingerprint_blob

#: A planned mini-batch, the result it takes from a reuse source (or None), its files' checks (or None: not known
#: yet), as `inputs.members.token_checks` gives them.
PlanRow = tuple[MiniBatch, "dict[str, Any] | None", "bytes | None"]

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS names (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
{MEMBERS_SCHEMA}
CREATE TABLE IF NOT EXISTS mini_batches (
    idx INTEGER PRIMARY KEY,
    fingerprint,                             -- 20 bytes (a sha1); NULL until the worker fingerprints what it read
    source TEXT,                             -- what it reads, for people; file mini-batches: from their members
    items INTEGER,
    nbytes INTEGER,
    descriptor BLOB,                         -- the pickled MiniBatch of a pending one, when pending() is to read it
    first INTEGER,                           -- file mini-batches: where their `items` files begin in `members`
    checks BLOB,                             -- and a 4-byte check of each file's size and mtime (or hash), once known
    state INTEGER NOT NULL DEFAULT 0,        -- 0 pending, 1 succeeded, 2 failed
    attempts INTEGER NOT NULL DEFAULT 0,
    spool INTEGER,                           -- the spool file (names.id, relative to the run folder when in it),
    part_offset INTEGER,                     -- offset and length of the successful attempt's rows
    part_length INTEGER,                     -- (see store/output.py)
    returned INTEGER,                        -- elements run() returned
    items_failed INTEGER,
    reused_from INTEGER,                     -- the run the result was taken from (names.id)
    error TEXT,
    exit_code INTEGER,
    worker INTEGER,                          -- names.id
    duration_us INTEGER
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

_LAYOUT = 3  # PRAGMA user_version; a ledger of an older layout is rebuilt, and is no reuse source
_DAMAGED = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)  # what a truncated or overwritten file gives
_GO_ON = "rerun the step in a fresh run directory (--run-dir), or delete this one and rerun it"
_TABLES = ("meta", "names", "members", "mini_batches", "attempts")

_SUCCEED = (
    f"UPDATE mini_batches SET state={SUCCEEDED}, attempts=?, spool=?, part_offset=?, part_length=?, returned=?,"
    " items_failed=?, items=coalesce(items, ?), worker=?, duration_us=?, error=?,"
    " fingerprint=coalesce(?, fingerprint), checks=coalesce(?, checks) WHERE idx=?"
)
_ADD = "INSERT INTO mini_batches (idx, fingerprint, source, items, nbytes, descriptor, first, checks"
_ADD_PENDING = _ADD + ") VALUES (?,?,?,?,?,?,?,?)"
_ADD_STREAMED = "INSERT INTO mini_batches (idx, items, nbytes, first) VALUES (?,?,?,?)"
_ADD_REUSED = (
    _ADD + f", spool, part_offset, part_length, returned, items_failed, reused_from, state)"
    f" VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,{SUCCEEDED})"
)


class Ledger(LedgerQueries):
    """One run's ledger file: the writes (the reads are `LedgerQueries`'); `Ledger.open_readonly` for
    other runs (reuse, status)."""

    def __init__(self, path: str | Path, readonly: bool = False):
        self.path = Path(path)
        uri = f"file:{self.path}?mode=ro" if readonly else f"file:{self.path}"
        existed = self.path.is_file() and self.path.stat().st_size > 0
        self._db = sqlite3.connect(uri, uri=True, timeout=30, isolation_level="DEFERRED", check_same_thread=False)
        self._base = None if str(path) == ":memory:" else self.path.absolute().parent
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
        self._members = None if readonly else MemberWriter(self._db)
        self._successes: list[tuple[Any, ...]] = []  # written by commit(), many rows per statement
        self._ids: dict[str, int] = {}
        self._spool_ids: dict[str, int] = {}  # by the path workers name
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
        if layout == _LAYOUT:
            self._db.executescript(_SCHEMA)
            return
        # One transaction: a reader (`status` while the run starts) sees the layout only with its tables.
        drops = " ".join(f"DROP TABLE IF EXISTS {table};" for table in _TABLES)
        self._db.executescript(f"BEGIN; {drops} {_SCHEMA} PRAGMA user_version={_LAYOUT}; COMMIT;")

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
        """Commit (a writer) and close, once; closed also when the commit fails (a full disk: SQLite rolls
        it back)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._members is not None:
                self.commit()
        finally:
            self._db.close()

    def commit(self) -> None:
        if self._members is not None:
            self._members.write()
        if self._successes:
            self._db.executemany(_SUCCEED, self._successes)
            self._successes = []
        write_site("ledger", self.path)
        self._db.commit()

    def rollback(self) -> None:
        self._successes = []
        self._db.rollback()
        self._ids, self._spool_ids = {}, {}
        if self._members is not None:
            self._members.reload()

    # Meta and names -----------------------------------------------------------------------

    def set(self, **values: Any) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, None if v is None else str(v)) for k, v in values.items()]
        )

    def _id(self, name: str) -> int:
        """The id of a name (a spool file, a worker, a run), added the first time it is written."""
        found = self._ids.get(name)
        if found is None:
            row = self._db.execute("SELECT id FROM names WHERE name=?", (name,)).fetchone()
            found = row[0] if row else self._db.execute("INSERT INTO names (name) VALUES (?)", (name,)).lastrowid
            self._ids[name] = found = int(found or 0)
        return found

    def _spool_id(self, path: str) -> int:
        """Spool files in the run folder are named relative to it (`./parts/...`), so the folder may move."""
        found = self._spool_ids.get(path)  # once per success: a few spools, looked up many times
        if found is None:
            name = path
            if self._base is not None and path.startswith(str(self._base) + "/"):
                name = "./" + path[len(str(self._base)) + 1 :]
            found = self._spool_ids[path] = self._id(name)
        return found

    # The plan ------------------------------------------------------------------

    def clear_plan(self) -> None:
        self._db.execute("DELETE FROM mini_batches")
        self._db.execute(f"DELETE FROM meta WHERE key='{PLAN_COMPLETE}'")
        self._member_writer().clear()

    def plan_written(self) -> None:
        """The plan is complete (a plan written while the run goes may end with its driver: `plan_complete`)."""
        self.set(**{PLAN_COMPLETE: 1})

    def add(self, rows: Iterable[PlanRow], descriptors: bool = True) -> None:
        """Insert planned mini-batches; a reused result (part, returned, items_failed, run_id) marks it succeeded.
        File mini-batches keep their member files (and their files' checks, when known) for the next plan.
        Without `descriptors` (the driver holds the mini-batches already) a row costs a fraction of the time."""
        streamed, pending, reused = [], [], []
        place = self._member_writer().place
        for mb, reuse, checks in rows:
            files = mb.kind == "files"
            if files and not (descriptors or reuse or checks or mb.fingerprint):  # a fresh plan's: 4 columns
                streamed.append((mb.index, mb.items, mb.nbytes, place(mb.paths)))
                continue
            plan = (
                mb.index,
                fingerprint_blob(mb.fingerprint),
                None if files else mb.describe(),
                mb.items,
                mb.nbytes,
                pickle.dumps(mb, protocol=pickle.HIGHEST_PROTOCOL) if descriptors and not reuse else None,
                place(mb.paths) if files else None,
                checks,
            )
            if reuse:
                path, offset, length = reuse["part"] or (None, None, None)
                spool = None if path is None else self._spool_id(path)
                source = self._id(reuse["run_id"]) if reuse["run_id"] else None
                reused.append((*plan, spool, offset, length, reuse["returned"], reuse["items_failed"], source))
            else:
                pending.append(plan)
        for statement, values in ((_ADD_STREAMED, streamed), (_ADD_PENDING, pending), (_ADD_REUSED, reused)):
            if values:  # binding is most of a row's cost: a statement of the columns a row has
                self._db.executemany(statement, values)

    def _member_writer(self) -> MemberWriter:
        if self._members is None:
            raise RuntimeError(f"{self.path} is open read-only")
        return self._members

    def plan(self) -> Iterator[EarlierBatch]:
        if self._members is not None:
            self._members.write()  # what was placed since the last commit is part of the plan read back
        return super().plan()

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
        checks: bytes | None = None,
        row_errors: str | None = None,
    ) -> None:
        """Written with the next `commit()`; `fingerprint` and `checks` when the worker made them. `row_errors`:
        what the rows that returned an error say (such a result is not reused: a rerun runs it again)."""
        spool, offset, length = (None, None, None) if part is None else (self._spool_id(part[0]), part[1], part[2])
        self._successes.append(
            (
                attempts,
                spool,
                offset,
                length,
                returned,
                items_failed,
                items,
                self._id(worker),
                round(duration * 1e6),
                row_errors,
                fingerprint_blob(fingerprint),
                checks,
                idx,
            )
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
            f"UPDATE mini_batches SET state={FAILED}, attempts=?, error=?, exit_code=?,"
            " items=coalesce(items, ?), worker=?, duration_us=? WHERE idx=?",
            (attempts, error, exit_code, items, self._id(worker), round(duration * 1e6), idx),
        )
