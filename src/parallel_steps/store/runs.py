"""The run root: run ids, run directories, the index of runs, and the lock that serialises runs of one key.

Layout under `run_root`: `index.sqlite` (one row per run), `locks/`, and one
folder per run (`<run_id>/`, or a folder an integration chose). A run folder
holds `run.json`, `ledger.sqlite`, `parts/`, `logs/` and, by default, `output/`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from ..errors import InputError, ParallelStepsError
from ..summary import RunStatus
from .space import where_it_fits, write_site

ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING)
CANCEL_FILE = "cancel.requested"  # in a run directory: the driver stops the run when it appears
STEP_FILE = "step.json"  # in a run directory: the configuration of a detached run
CALLABLES_FILE = "entry_callables.pkl"  # in a run directory: a detached run's cloudpickled init/run/shutdown
RAY_JOB_FILE = "ray_job.json"  # in a run directory: the Ray job that runs its driver (jobs/ray_job.py)
DRIVER_LOCK = "driver.lock"  # in a run directory: held by the one driver running it (`hold_driver_lock`)
SECRETS_FILE = "driver_secrets.json"  # in a run directory (0600): a Ray job driver's secrets, until it reads them

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, name TEXT, run_dir TEXT, step_key TEXT, code_key TEXT,
    status TEXT, started_at REAL, ended_at REAL, pid INTEGER, host TEXT, summary TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_step_key ON runs (step_key, status);
CREATE INDEX IF NOT EXISTS runs_by_code_key ON runs (code_key, status);
"""


def new_run_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _use_wal(db: sqlite3.Connection, patience_s: float = 60.0) -> None:
    """Switch to WAL. While another process creates the file, the switch fails at once with
    "database is locked" (SQLite's busy timeout does not cover it), so try again for a while."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class RunIndex:
    """The index of the runs under one run root."""

    def __init__(self, run_root: Path):
        self.root = Path(run_root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / "index.sqlite"
        write_site("run_index", self.path)
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        _use_wal(self._db)
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def register(
        self,
        run_id: str,
        name: str,
        run_dir: Path,
        status: str,
        code_key: str | None = None,
        step_key: str | None = None,
        pid: int | None = None,
    ) -> None:
        write_site("run_index", self.path)
        self._db.execute(
            "INSERT INTO runs (run_id, name, run_dir, status, code_key, step_key, started_at, pid, host)"
            " VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(run_id) DO UPDATE SET status=excluded.status,"
            " code_key=coalesce(excluded.code_key, code_key), step_key=coalesce(excluded.step_key, step_key),"
            " pid=excluded.pid, ended_at=NULL",
            (
                run_id,
                name,
                str(run_dir),
                status,
                code_key,
                step_key,
                time.time(),
                pid or os.getpid(),
                os.uname().nodename,
            ),
        )

    def update(self, run_id: str, **fields: Any) -> None:
        if "summary" in fields:
            fields["summary"] = json.dumps(fields["summary"])
        write_site("run_index", self.path)
        sets = ", ".join(f"{k}=?" for k in fields)
        self._db.execute(f"UPDATE runs SET {sets} WHERE run_id=?", (*fields.values(), run_id))

    def get(self, run_id: str) -> dict[str, Any] | None:
        rows = self._mended(self._select("WHERE run_id=?", (run_id,)))
        return rows[0] if rows else None

    def succeeded_with_step_key(self, step_key: str) -> dict[str, Any] | None:
        rows = self._select("WHERE step_key=? AND status='Succeeded' ORDER BY ended_at DESC", (step_key,))
        return rows[0] if rows else None

    def with_code_key(self, code_key: str, exclude: str) -> list[dict[str, Any]]:
        """Earlier runs whose committed results a run with this code key may reuse, newest first."""
        return self._select("WHERE code_key=? AND run_id<>? ORDER BY started_at DESC", (code_key, exclude))

    def runs(self, name: str | None = None) -> list[dict[str, Any]]:
        if name:
            return self._mended(self._select("WHERE name=? ORDER BY started_at", (name,)))
        return self._mended(self._select("ORDER BY started_at", ()))

    def remove(self, run_id: str) -> None:
        write_site("run_index", self.path)
        self._db.execute("DELETE FROM runs WHERE run_id=?", (run_id,))

    def _mended(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`records`, those the index missed the end of mended from their run.json: a row still active whose driver
        is gone while its run.json says the run ended (the disk refused the index that end: store/space.py).
        Written back where the disk now allows; read as mended either way."""
        for record in records:
            if record["status"] not in ACTIVE or driver_alive(record):
                continue
            summary = read_summary(Path(record["run_dir"]))
            if summary is None or summary.get("status") in ACTIVE or summary.get("run_id") != record["run_id"]:
                continue
            ended_at = (Path(record["run_dir"]) / "run.json").stat().st_mtime
            record.update(status=summary["status"], ended_at=ended_at, summary=json.dumps(summary))
            with where_it_fits():
                self.update(record["run_id"], status=summary["status"], ended_at=ended_at, summary=summary)
        return records

    def _select(self, where: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
        cursor = self._db.execute(f"SELECT * FROM runs {where}", args)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor]


def driver_alive(record: dict[str, Any]) -> bool:
    """Whether the process that runs `record` still lives (only answerable on its own host)."""
    if record.get("host") != os.uname().nodename or not record.get("pid"):
        return True
    try:
        os.kill(record["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def key_lock(run_root: Path, key: str, timeout: float, check: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the lock of one step key: a second run with the same key waits here (bounded; `check`, called
    while it waits, may raise to stop waiting: a cancel).

    An flock, so a killed holder releases it with its last file descriptor.
    """
    folder = Path(run_root) / "locks"
    path = folder / f"{key[:32]}.lock"
    write_site("key_lock", path)
    folder.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as file:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ParallelStepsError(
                        f"another run with the same inputs and settings is still running after {timeout:.0f} s "
                        f"(wait for it, or set allow_reuse=False)"
                    ) from None
                if check is not None:
                    check()
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def hold_driver_lock(run_dir: Path) -> IO[str]:
    """Take the lock of the run's one driver, or fail at once naming its holder; closing the file releases it.

    An flock on a file in the run directory: a killed driver releases it with its process, and
    on a shared file system that locks across clients (NFSv4, CephFS, Lustre mounted with
    flock) a driver on another machine (a Ray job, a worker's retry) holds it too.
    """
    write_site("driver_lock", Path(run_dir) / DRIVER_LOCK)
    file = open(Path(run_dir) / DRIVER_LOCK, "a+")  # held open as long as the driver runs
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.seek(0)
        holder = file.read().strip() or "another process"
        file.close()
        raise InputError(
            str(run_dir), f"another driver is running this run ({holder}); follow it with status or wait, or cancel it"
        ) from None
    file.truncate(0)
    file.write(f"pid {os.getpid()} on {os.uname().nodename} since {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
    file.flush()
    return file


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        summary: dict[str, Any] = json.loads((Path(run_dir) / "run.json").read_text())
        return summary
    except (OSError, ValueError):
        return None


def write_summary(run_dir: Path, summary: Mapping[str, Any]) -> None:
    path = Path(run_dir) / "run.json"
    tmp = path.with_name(".run.json.tmp")
    write_site("run_summary", path)
    tmp.write_text(json.dumps(summary, indent=2, default=str))
    os.replace(tmp, path)


def write_ray_job(run_dir: Path, address: str, job_id: str) -> None:
    """Name the Ray job that runs the run's driver (and the Jobs API address that knows it)."""
    write_site("ray_job", Path(run_dir) / RAY_JOB_FILE)
    (Path(run_dir) / RAY_JOB_FILE).write_text(json.dumps(dict(address=address, submission_id=job_id)))


def read_ray_job(run_dir: Path) -> dict[str, str] | None:
    """`{"address": ..., "submission_id": ...}` of a run whose driver is a Ray job; None for other runs."""
    try:
        record: dict[str, str] = json.loads((Path(run_dir) / RAY_JOB_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record


def request_cancel(run_dir: Path, reason: str) -> None:
    (Path(run_dir) / CANCEL_FILE).write_text(reason)


def cancel_requested(run_dir: Path) -> str | None:
    """The reason of a pending cancel request, or None."""
    try:
        return (Path(run_dir) / CANCEL_FILE).read_text().strip() or "canceled by the user"
    except OSError:
        return None
