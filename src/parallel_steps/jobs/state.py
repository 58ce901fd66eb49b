"""A run's state, as anyone who sees its folder reads it: which directory a run id names, the run's
summary with live counts, whether its driver is gone, and the request that cancels it.

A run's state comes from `run.json` (written when it is queued, starts and ends), its
progress snapshot and its ledger (committed as mini-batches finish), so a running run
reports live counts. A driver that runs as a Ray job (`ray_job.json` in the run directory)
is confirmed by the Jobs API (jobs/ray_job.py). Cancel is a request file in the run
directory that the driver checks, so it works from any process that sees the folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config.types import default_run_root
from ..errors import InputError, ParallelStepsError
from ..store.ledger import Ledger
from ..store.logs import RunLogs
from ..store.runs import ACTIVE, RunIndex, driver_alive, read_ray_job, read_summary, request_cancel
from ..summary import TERMINAL


def resolve_run(run: str, run_root: str | None = None) -> Path:
    """The run directory of `run`: a run directory, or a run id under the run root."""
    if (Path(run) / "run.json").exists() or (Path(run) / "ledger.sqlite").exists():
        return Path(run).absolute()
    root = default_run_root(run_root)
    if (root / "index.sqlite").exists():
        index = RunIndex(root)
        try:
            record = index.get(run)
        finally:
            index.close()
        if record:
            return Path(record["run_dir"])
    if (root / run / "run.json").exists():
        return root / run
    raise InputError(run, f"no such run (not a run directory, nor a run id under {root})")


def run_status(run: str, run_root: str | None = None, mini_batches: bool = False) -> dict[str, Any]:
    """The summary of a run, with live counts from its ledger while it runs.

    Raises:
        ParallelStepsError: the state cannot be read now (e.g. the Jobs API of a Ray job's cluster
            does not answer); whoever follows the run tries again (jobs/follow.py).
    """
    run_dir = resolve_run(run, run_root)
    ray_job = read_ray_job(run_dir)
    summary = (
        read_summary(run_dir)
        or _unreadable(run_dir, run_root)
        or {
            "run_id": run_dir.name,
            "status": "Queued",
            "status_reason": "not started",
            "run_dir": str(run_dir),
        }
    )
    if summary["status"] in ACTIVE and (ended := _ended(summary, ray_job)):
        summary = read_summary(run_dir) or summary  # the driver may have written its end meanwhile
        if summary["status"] in ACTIVE:
            summary["status"], summary["status_reason"] = ended
    if ray_job:
        summary["ray_job"] = ray_job["submission_id"]
    if summary["status"] in ACTIVE:
        progress = RunLogs(run_dir, create=False).read_progress()
        summary.update({key: value for key, value in progress.items() if key != "status"})
    ledger = Ledger.open_readonly(run_dir / "ledger.sqlite")
    if ledger is None:
        return summary
    try:
        counts = ledger.counts()
        if summary["status"] in ACTIVE:
            summary.update(
                mini_batches_total=sum(counts.values()),
                mini_batches_succeeded=counts.get("succeeded", 0),
                mini_batches_failed=counts.get("failed", 0),
            )
        summary["mini_batches_pending"] = counts.get("pending", 0)
        if mini_batches:
            summary["mini_batches"] = ledger.rows()
    finally:
        ledger.close()
    return summary


def _unreadable(run_dir: Path, run_root: str | None) -> dict[str, Any] | None:
    """A run.json that is there but damaged (run.json is written whole, by a rename): the summary the run's
    end left in the index, else an error saying how to go on; None when there is no run.json (yet)."""
    path = run_dir / "run.json"
    if not path.exists():
        return None
    ledger = Ledger.open_readonly(run_dir / "ledger.sqlite")
    run_id = (ledger.get("run_id") if ledger else None) or run_dir.name
    if ledger:
        ledger.close()
    index = RunIndex(default_run_root(run_root))
    try:
        record = index.get(run_id)
    finally:
        index.close()
    if record and record["status"] in TERMINAL and record.get("summary"):
        return dict(json.loads(record["summary"]))
    raise InputError(
        str(path),
        "is damaged (not a JSON summary); rerun the step in the same run directory: it resumes and writes it again",
    )


def driver_ended(run_dir: Path, summary: Mapping[str, Any]) -> tuple[str, str] | None:
    """(status, reason) of a run said to be active whose driver is gone; None while it runs (or where
    nobody can tell: a local driver on another machine)."""
    return _ended(summary, read_ray_job(run_dir))


def _ended(summary: Mapping[str, Any], ray_job: Mapping[str, str] | None) -> tuple[str, str] | None:
    if ray_job:
        from .ray_job import job_ended  # Ray is imported only for runs that use it

        return job_ended(ray_job)
    if not driver_alive(dict(summary)):
        return "Failed", "the driver process is gone (killed, or its machine lost); rerun the step to resume it"
    return None


def cancel(run: str, run_root: str | None = None, reason: str = "canceled by the user") -> dict[str, Any]:
    """Ask the run's driver to stop (it notices within a second and stops every worker); a driver that
    runs as a Ray job is also stopped through the Jobs API (the job ends STOPPED).

    Raises:
        ParallelStepsError: the run has already ended.
    """
    run_dir = resolve_run(run, run_root)
    summary = run_status(str(run_dir))
    if summary["status"] in TERMINAL:
        raise ParallelStepsError(f"run {summary['run_id']} already ended: {summary['status']}")
    request_cancel(run_dir, reason)
    if ray_job := read_ray_job(run_dir):
        from .ray_job import stop_job

        stop_job(ray_job)
    return summary
