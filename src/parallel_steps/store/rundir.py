"""One run's directory: where it is, what it holds, and how it is left behind.

    <run_dir>/run.json        the summary (store/runs.py)
              ledger.sqlite   the plan and every outcome (store/ledger/writes.py)
              parts/          the workers' spool files of results (store/output.py); a Ray actor's
                              note of the last call it ended (pool/ray/ends.py)
              logs/           the ParallelRunStep log layout (store/logs.py)
              output/         the output file, unless `output` names another folder or a URL
              step.json       the configuration of a detached run (jobs/handle.py)
              entry_callables.pkl  a detached run's init/run/shutdown functions (jobs/handle.py)
              ray_job.json    the Ray job that runs the driver of a `submit_to: ray_job` run
              cancel.requested  written by `parallel-steps cancel`
              driver.lock     locked by the run's one driver while it runs (who: pid, host, since)

A rerun in the same directory with the same code key resumes it; with another key it
starts afresh there. A user error found before anything ran removes what this run made.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..storage.objects import is_url
from .ledger import Ledger
from .logs import RunLogs
from .output import link_or_copy
from .runs import CANCEL_FILE, STEP_FILE, hold_driver_lock, new_run_id, write_summary


class RunDirectory:
    """Opens (or resumes) a run directory; the ledger, logs and output folder of the run."""

    def __init__(
        self,
        run_root: Path,
        name: str,
        code: str,
        output: str | None,
        requested_dir: Path | None = None,
        requested_id: str | None = None,
    ):
        self.path = requested_dir or run_root / (requested_id or new_run_id(name))
        self.chosen = requested_dir is not None  # a folder the caller chose (a task instance's) is kept
        self.created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        self._driver_lock = hold_driver_lock(self.path)  # before anything here is read or changed
        self.parts = self.path / "parts"
        self.parts.mkdir(exist_ok=True)
        self.output_url = output if output and is_url(output) else None  # staged here, then uploaded
        self.output_dir = Path(output).absolute() if output and not self.output_url else self.path / "output"
        self.created_output = False  # this run made the output folder (removed again on a user error)
        try:
            self.ledger = Ledger(self.path / "ledger.sqlite")  # a damaged one, or a newer version's: one line
        except Exception:
            self.release()
            raise
        self.run_id = self.ledger.get("run_id") or requested_id or self.path.name
        self.resumed = self.ledger.get("code_key") == code
        if not self.resumed:
            self.ledger.clear_plan()
            shutil.rmtree(self.parts)
            self.parts.mkdir()
        self.ledger.set(run_id=self.run_id, code_key=code)
        self.logs = RunLogs(self.path)

    def release(self) -> None:
        """Let another driver run this run (a rerun, a resume)."""
        self._driver_lock.close()

    def make_output_dir(self) -> None:
        self.created_output = not self.output_dir.exists()
        self.output_dir.mkdir(parents=True, exist_ok=True)

    def drop_stale_cancel(self, started_at: float) -> None:
        """A cancel request left by an earlier run in this folder must not stop this one; one made after
        the run was submitted (step.json) or started must."""
        request, submitted = self.path / CANCEL_FILE, self.path / STEP_FILE
        since = submitted.stat().st_mtime if submitted.exists() else started_at
        if request.exists() and request.stat().st_mtime < since:
            request.unlink()

    def link_spool(self, run_id: str, path: str) -> str:
        """Keep the run self-contained: link an earlier run's spool in (once), so cleaning that run
        does not take this run's reused rows with it."""
        own = self.parts / f"{run_id}-{Path(path).name}"
        if not own.exists():
            link_or_copy(Path(path), own)
        return str(own)

    def discard(self) -> None:
        """Leave no trace of a run that ran nothing (a user error, or a reuse into no chosen folder)."""
        self.ledger.close()
        if self.created:
            shutil.rmtree(self.path, ignore_errors=True)
        if self.created_output:
            with contextlib.suppress(OSError):
                self.output_dir.rmdir()  # only if nothing was written there

    def keep_reused(self, summary: Mapping[str, Any]) -> None:
        """A chosen folder keeps the restored output and the summary, not the empty ledger."""
        self.ledger.close()
        for leftover in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"):
            (self.path / leftover).unlink(missing_ok=True)
        shutil.rmtree(self.parts, ignore_errors=True)
        write_summary(self.path, summary)
