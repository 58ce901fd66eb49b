"""Job control over run directories: find a run by id or folder, and report its state.

A run's state comes from `run.json` (written at start and end) and its ledger
(committed as mini-batches finish), so a running run reports live counts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import InputError
from .store.ledger import Ledger
from .store.runs import RunIndex, driver_alive, read_summary


def default_run_root(run_root: str | None = None) -> Path:
    return Path(run_root or os.environ.get("PARALLEL_STEPS_HOME") or ".parallel_steps").absolute()


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
    """The summary of a run, with live counts from its ledger while it runs."""
    run_dir = resolve_run(run, run_root)
    summary = read_summary(run_dir) or {"run_id": run_dir.name, "status": "Queued", "status_reason": "not started yet",
                                        "run_dir": str(run_dir)}
    ledger = Ledger.open_readonly(run_dir / "ledger.sqlite")
    if ledger is None:
        return summary
    try:
        counts = ledger.counts()
        if summary["status"] in ("Queued", "Running"):
            summary.update(mini_batches_total=sum(counts.values()),
                           mini_batches_succeeded=counts.get("succeeded", 0),
                           mini_batches_failed=counts.get("failed", 0))
            if not driver_alive({"pid": summary.get("pid"), "host": summary.get("host")}):
                summary.update(status="Failed", status_reason="the driver process is gone (killed or lost); "
                                                              "rerun the step to resume")
        summary["mini_batches_pending"] = counts.get("pending", 0)
        if mini_batches:
            summary["mini_batches"] = ledger.rows()
    finally:
        ledger.close()
    return summary
