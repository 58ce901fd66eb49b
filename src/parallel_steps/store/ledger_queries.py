"""The ledger's queries: what the driver, reuse, status, logs and the run report read from it.

None of them writes, so they serve the run's own ledger and another run's, opened
read-only (`Ledger.open_readonly`), alike. Apart from the writes (`ledger.py`, which
owns the schema and the batched commits), so either side reads on its own.
"""

from __future__ import annotations

import pickle
import sqlite3
from collections.abc import Iterator
from typing import Any

from ..inputs.members import EarlierBatch
from ..inputs.minibatch import MiniBatch
from .output import Part


class LedgerQueries:
    """Reads of one ledger file; `Ledger` adds the writes."""

    _db: sqlite3.Connection

    def layout(self) -> int:
        version: int = self._db.execute("PRAGMA user_version").fetchone()[0]
        return version

    def get(self, key: str, default: str | None = None) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def plan(self) -> Iterator[EarlierBatch]:
        """The plan's file mini-batches with their members, in plan order: the base of a sticky rerun."""
        query = "SELECT idx, members, tokens, fingerprint FROM mini_batches WHERE members IS NOT NULL ORDER BY idx"
        for row in self._db.execute(query):
            yield EarlierBatch(*row)

    def pending(self, chunk: int = 1000) -> Iterator[MiniBatch]:
        """Pending mini-batches in plan order, read a chunk at a time."""
        last = -1
        while True:
            rows = self._db.execute(
                "SELECT idx, descriptor FROM mini_batches WHERE state='pending' AND idx>? ORDER BY idx LIMIT ?",
                (last, chunk),
            ).fetchall()
            if not rows:
                return
            for _, blob in rows:
                yield pickle.loads(blob)
            last = rows[-1][0]

    def parts(self) -> Iterator[Part]:
        """The slice of every succeeded mini-batch that returned rows, in plan order."""
        for row in self._db.execute(
            "SELECT part, part_offset, part_length FROM mini_batches"
            " WHERE state='succeeded' AND part IS NOT NULL ORDER BY idx"
        ):
            yield Part(*row)

    def rows_written(self) -> int:
        """Rows in the output: what run() returned for every succeeded mini-batch that has a slice."""
        row = self._db.execute(
            "SELECT COALESCE(SUM(returned), 0) FROM mini_batches WHERE state='succeeded' AND part IS NOT NULL"
        ).fetchone()
        written: int = row[0]
        return written

    def results_by_fingerprint(self) -> dict[str, dict[str, Any]]:
        """Succeeded results keyed by input fingerprint: what a later run may reuse (`reused_from`: the
        run that made a result this run took from it)."""
        rows = self._db.execute(
            "SELECT fingerprint, part, part_offset, part_length, returned, items_failed, items, reused_from"
            " FROM mini_batches WHERE state='succeeded' AND fingerprint IS NOT NULL"
        )
        return {
            fp: dict(
                part=Part(path, offset, length) if path else None,
                returned=returned,
                items_failed=failed,
                items=items,
                reused_from=origin,
            )
            for fp, path, offset, length, returned, failed, items, origin in rows
        }

    def fingerprints(self) -> list[str | None]:
        return [fp for (fp,) in self._db.execute("SELECT fingerprint FROM mini_batches ORDER BY idx")]

    def counts(self) -> dict[str, int]:
        rows = self._db.execute("SELECT state, count(*) FROM mini_batches GROUP BY state")
        return dict(rows.fetchall())

    def rows(self, idx: int | None = None) -> list[dict[str, Any]]:
        """Mini-batch rows for status and logs commands (without the descriptor)."""
        query = (
            "SELECT idx, source, items, state, attempts, returned, items_failed, reused_from, error,"
            " exit_code, worker, duration FROM mini_batches"
        )
        cursor = self._db.execute(
            query + (" WHERE idx=?" if idx is not None else " ORDER BY idx"), (idx,) if idx is not None else ()
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor]

    def attempts(self, idx: int) -> list[dict[str, Any]]:
        cursor = self._db.execute("SELECT * FROM attempts WHERE idx=? ORDER BY attempt", (idx,))
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor]
