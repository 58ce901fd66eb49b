"""The ledger's queries: what the driver, reuse, status, logs and the run report read from it.

None of them writes, so they serve the run's own ledger and another run's, opened
read-only (`Ledger.open_readonly`), alike. Apart from the writes (`ledger.py`, which
owns the schema and the batched commits), so either side reads on its own. The reads
give back what the compact rows stand for: states as text, fingerprints as hex, spool
files, workers and runs by name, a file mini-batch's files from the plan's members.
"""

from __future__ import annotations

import pickle
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...inputs.members import EarlierBatch, encode_members
from ...inputs.minibatch import MiniBatch
from ..output import Part
from .members import MemberReader

PENDING, SUCCEEDED, FAILED = 0, 1, 2
PLAN_COMPLETE = "plan_complete"  # the meta key set once the plan is written to its end
_STATES = {PENDING: "pending", SUCCEEDED: "succeeded", FAILED: "failed"}
_ROW_COLUMNS = (
    "idx, source, items, state, attempts, returned, items_failed, reused_from, error, exit_code, worker,"
    " duration_us, first"
)


def fingerprint_blob(fingerprint: str | None) -> str | bytes | None:
    """A sha1 fingerprint as its 20 bytes (half the hex text); any other text as it is."""
    if fingerprint is not None and len(fingerprint) == 40:
        try:
            return bytes.fromhex(fingerprint)
        except ValueError:
            pass
    return fingerprint


def fingerprint_text(stored: str | bytes | None) -> str | None:
    return stored.hex() if isinstance(stored, bytes) else stored


class LedgerQueries:
    """Reads of one ledger file; `Ledger` adds the writes."""

    _db: sqlite3.Connection
    _base: Path | None  # the run folder, which spool names are relative to

    def layout(self) -> int:
        version: int = self._db.execute("PRAGMA user_version").fetchone()[0]
        return version

    def get(self, key: str, default: str | None = None) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def plan_complete(self) -> bool:
        """Whether the plan was written to its end (see `Ledger.plan_written`)."""
        return self.get(PLAN_COMPLETE) is not None

    def plan(self) -> Iterator[EarlierBatch]:
        """The plan's file mini-batches with their members, in plan order: the base of a sticky rerun."""
        members = MemberReader(self._db)
        query = "SELECT idx, first, items, checks, fingerprint FROM mini_batches WHERE first IS NOT NULL ORDER BY idx"
        for idx, first, items, checks, fingerprint in self._db.execute(query):
            paths = members.slice(first, items)
            if len(paths) == items and paths:  # a plan written before its members were: no sticky batch
                yield EarlierBatch(idx, encode_members(tuple(paths)), checks, fingerprint_text(fingerprint))

    def pending(self, chunk: int = 1000) -> Iterator[MiniBatch]:
        """Pending mini-batches in plan order, read a chunk at a time."""
        last = -1
        while True:
            rows = self._db.execute(
                f"SELECT idx, descriptor FROM mini_batches WHERE state={PENDING} AND idx>? ORDER BY idx LIMIT ?",
                (last, chunk),
            ).fetchall()
            if not rows:
                return
            for _, blob in rows:
                yield pickle.loads(blob)
            last = rows[-1][0]

    def parts(self, first: int = 0, end: int = 2**62) -> Iterator[Part]:
        """The slice of every succeeded mini-batch that returned rows, in plan order (those from `first` to
        before `end`: one partition's)."""
        spools = self._spools()
        for spool, offset, length in self._db.execute(
            "SELECT spool, part_offset, part_length FROM mini_batches"
            f" WHERE state={SUCCEEDED} AND spool IS NOT NULL AND idx >= ? AND idx < ? ORDER BY idx",
            (first, end),
        ):
            yield Part(spools[spool], offset, length)

    def span_counts(self, first: int, end: int, no_result_fails: bool = True) -> dict[str, int]:
        """The counts of the mini-batches from `first` to before `end` (one partition's), as a summary has
        them: items run() returned no result for are failed items unless `no_result_fails` is off."""
        no_result = "0" if no_result_fails else "min(items_failed, max(0, items - returned))"
        row = self._db.execute(
            f"""SELECT count(*), COALESCE(sum(state={SUCCEEDED}), 0), COALESCE(sum(state={FAILED}), 0),
                COALESCE(sum(reused_from IS NOT NULL), 0), COALESCE(sum(items), 0),
                COALESCE(sum(CASE state WHEN {SUCCEEDED} THEN items_failed - {no_result}
                                        WHEN {FAILED} THEN items ELSE 0 END), 0),
                COALESCE(sum(CASE WHEN state={SUCCEEDED} THEN {no_result} ELSE 0 END), 0),
                COALESCE(sum(CASE WHEN state={SUCCEEDED} THEN items - items_failed ELSE 0 END), 0),
                COALESCE(sum(CASE WHEN state={SUCCEEDED} AND spool IS NOT NULL THEN returned ELSE 0 END), 0)
            FROM mini_batches WHERE idx >= ? AND idx < ?""",
            (first, end),
        ).fetchone()
        total, succeeded, failed, reused, items, items_failed, without_result, items_succeeded, rows = row
        return dict(
            mini_batches_total=total,
            mini_batches_succeeded=succeeded,
            mini_batches_failed=failed,
            mini_batches_reused=reused,
            mini_batches_run=succeeded + failed - reused,
            items_total=items,
            items_succeeded=items_succeeded,
            items_failed=items_failed,
            items_without_result=without_result,
            rows_written=rows,
        )

    def rows_written(self) -> int:
        """Rows in the output: what run() returned for every succeeded mini-batch that has a slice."""
        row = self._db.execute(
            f"SELECT COALESCE(SUM(returned), 0) FROM mini_batches WHERE state={SUCCEEDED} AND spool IS NOT NULL"
        ).fetchone()
        written: int = row[0]
        return written

    def results_by_fingerprint(self) -> dict[str, dict[str, Any]]:
        """Succeeded results keyed by input fingerprint: what a later run may reuse (`reused_from`: the
        run that made a result this run took from it). Not those with rows that returned an error: a rerun
        runs them again."""
        names, spools = self._names(), self._spools()
        rows = self._db.execute(
            "SELECT fingerprint, spool, part_offset, part_length, returned, items_failed, items, reused_from"
            f" FROM mini_batches WHERE state={SUCCEEDED} AND fingerprint IS NOT NULL AND error IS NULL"
        )
        return {
            fingerprint_text(fp) or "": dict(
                part=Part(spools[spool], offset, length) if spool is not None else None,
                returned=returned,
                items_failed=failed,
                items=items,
                reused_from=names.get(origin),
            )
            for fp, spool, offset, length, returned, failed, items, origin in rows
        }

    def first_error(self, first: int, end: int) -> str | None:
        """The error of the first failed mini-batch from `first` to before `end` (one partition's)."""
        row = self._db.execute(
            f"SELECT error FROM mini_batches WHERE state={FAILED} AND idx >= ? AND idx < ? ORDER BY idx LIMIT 1",
            (first, end),
        ).fetchone()
        return row[0] if row else None

    def fingerprints(self) -> list[str | None]:
        return [fingerprint_text(fp) for (fp,) in self._db.execute("SELECT fingerprint FROM mini_batches ORDER BY idx")]

    def counts(self) -> dict[str, int]:
        rows = self._db.execute("SELECT state, count(*) FROM mini_batches GROUP BY state")
        return {_STATES[state]: count for state, count in rows}

    def reused_from(self) -> dict[str, int]:
        """Reused mini-batches by the run they were taken from, counted in SQLite (a rerun reuses many)."""
        names = self._names()
        query = "SELECT reused_from, count(*) FROM mini_batches WHERE reused_from IS NOT NULL GROUP BY reused_from"
        return {names[origin]: count for origin, count in self._db.execute(query)}

    def rows(self, idx: int | None = None) -> list[dict[str, Any]]:
        """Mini-batch rows for status and logs commands (without the descriptor)."""
        names, members = self._names(), MemberReader(self._db)
        query = f"SELECT {_ROW_COLUMNS} FROM mini_batches"
        cursor = self._db.execute(
            query + (" WHERE idx=?" if idx is not None else " ORDER BY idx"), (idx,) if idx is not None else ()
        )
        found = []
        for index, source, items, state, attempts, returned, failed, origin, error, code, worker, us, first in cursor:
            if source is None and first is not None:
                source = _describe_files(members.slice(first, items or 0))
            found.append(
                dict(
                    idx=index,
                    source=source,
                    items=items,
                    state=_STATES[state],
                    attempts=attempts,
                    returned=returned,
                    items_failed=failed,
                    reused_from=names.get(origin),
                    error=error,
                    exit_code=code,
                    worker=names.get(worker),
                    duration=None if us is None else us / 1e6,
                )
            )
        return found

    def attempts(self, idx: int) -> list[dict[str, Any]]:
        cursor = self._db.execute("SELECT * FROM attempts WHERE idx=? ORDER BY attempt", (idx,))
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor]

    def _names(self) -> dict[int, str]:
        return dict(self._db.execute("SELECT id, name FROM names").fetchall())

    def _spools(self) -> dict[int, str]:
        """Spool ids -> paths (`./` ones are in the run folder)."""
        base = self._base
        return {
            key: str(base / name[2:]) if base is not None and name.startswith("./") else name
            for key, name in self._names().items()
        }


def _describe_files(paths: list[str]) -> str:
    """What a file mini-batch reads, as its descriptor says it (`MiniBatch.describe`)."""
    if not paths:
        return "(its files are not in the ledger)"
    return MiniBatch(0, "files", tuple(paths), None, 0, len(paths)).describe()
