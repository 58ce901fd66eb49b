"""Job control, like a batch service's job object: submit a run to the background, then find it by id
or folder and ask its state, wait for it, cancel it, read its logs, list and clean runs.

A run's state comes from `run.json` (written when it is queued, starts and ends), its
progress snapshot and its ledger (committed as mini-batches finish), so a running run
reports live counts. Cancel is a request file in the run directory that the driver
checks, so it works from any process that sees the folder. The background process
itself is `detached.py`: on this machine, or on a Ray cluster as a Ray job
(`submit_to: ray_job`, submit/ray_job.py), whose state the Jobs API then confirms.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from .checks import check_inputs
from .config import ParallelRunConfig
from .config_types import default_run_root
from .environment import public_config, secret_fields
from .errors import ConfigError, InputError, ParallelStepsError
from .store.ledger import Ledger
from .store.logs import RunLogs
from .store.runs import (
    ACTIVE,
    CALLABLES_FILE,
    STEP_FILE,
    RunIndex,
    driver_alive,
    new_run_id,
    read_ray_job,
    read_summary,
    request_cancel,
    write_summary,
)
from .summary import TERMINAL, RunSummary

#: The environment variable through which a detached run gets the fields step.json holds masked
#: (`environment_variables`, `storage_options`, URLs with credentials), so no secret is written to the run directory.
ENVIRONMENT_VARIABLE = "PARALLEL_STEPS_DETACHED_ENVIRONMENT"
_POLL_S = 0.5


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


# Submitting ------------------------------------------------------------------------------


def submit(
    config: ParallelRunConfig,
    run_id: str | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    entry_callables: bytes | None = None,
) -> RunHandle:
    """Start the step's driver in the background, where `config.submit_to` says: a process on this
    machine that outlives the caller, or a Ray job on the cluster (`ray_job`: when the run's job is
    still running, this attaches to it instead); returns its handle at once.

    Everything that can be checked is checked here first, so a bad config or a missing
    input raises now instead of failing in the background.
    """
    check_inputs(config, entry_callables)
    run_id = run_id or new_run_id(config.name)
    folder = Path(run_dir).absolute() if run_dir else config.resolved_run_root() / run_id
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    if config.submit_to == "ray_job":
        from .submit.ray_job import submit_or_attach  # Ray is imported only by runs that use it

        try:
            return submit_or_attach(config, folder, run_id, entry_callables)
        except ConfigError:  # nothing runs: leave no trace
            if created:
                shutil.rmtree(folder, ignore_errors=True)
            raise
    prepare(config, folder, run_id, entry_callables)
    env = {**os.environ, ENVIRONMENT_VARIABLE: json.dumps(secret_fields(config))}
    with open(folder / "driver.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "parallel_steps.detached", str(folder), run_id],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    register(config, folder, run_id, pid=process.pid)
    return RunHandle(folder)


def prepare(config: ParallelRunConfig, run_dir: Path, run_id: str, entry_callables: bytes | None) -> None:
    """What a detached driver reads in its run directory: the step (secrets masked), the entry functions
    (if any) and a queued summary."""
    (run_dir / STEP_FILE).write_text(json.dumps(public_config(config)))
    callables = run_dir / CALLABLES_FILE
    if entry_callables is None:
        callables.unlink(missing_ok=True)
    else:
        callables.write_bytes(entry_callables)
    queued(run_dir, run_id, config.name, pid=None)


def register(config: ParallelRunConfig, run_dir: Path, run_id: str, pid: int | None) -> None:
    """List a submitted run in the run root's index (`runs`, and run ids for `status`)."""
    index = RunIndex(config.resolved_run_root())
    try:
        index.register(run_id, config.name, run_dir, "Queued", pid=pid)
    finally:
        index.close()


def queued(run_dir: Path, run_id: str, name: str, pid: int | None) -> None:
    """The summary of a run that is submitted and not yet running."""
    summary = RunSummary(run_id=run_id, name=name, status="Queued", status_reason="planning", run_dir=str(run_dir))
    write_summary(run_dir, dict(summary, pid=pid, host=os.uname().nodename))


class RunHandle:
    """A submitted or earlier run, by its run directory."""

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.run_dir = Path(run_dir)

    @property
    def run_id(self) -> str:
        return str(self.summary().get("run_id", self.run_dir.name))

    def status(self) -> str:
        """`Queued`, `Running`, `Succeeded`, `Failed` or `Canceled`."""
        return str(self.summary()["status"])

    def summary(self) -> dict[str, Any]:
        return run_status(str(self.run_dir))

    def wait(
        self,
        timeout: float | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        stop: threading.Event | None = None,
        on_error: Callable[[ParallelStepsError], None] | None = None,
    ) -> dict[str, Any]:
        """Block until the run ends (or `timeout` seconds pass: TimeoutError); returns its summary (see `wait`)."""
        return wait(str(self.run_dir), timeout=timeout, on_progress=on_progress, stop=stop, on_error=on_error)

    def cancel(self) -> None:
        cancel(str(self.run_dir))

    def logs(self, mini_batch: int | None = None, stderr: bool = False) -> str:
        return "".join(logs(str(self.run_dir), mini_batch=mini_batch, stderr=stderr))

    def __repr__(self) -> str:
        return f"RunHandle({str(self.run_dir)!r})"


# Asking -----------------------------------------------------------------------------------


def run_status(run: str, run_root: str | None = None, mini_batches: bool = False) -> dict[str, Any]:
    """The summary of a run, with live counts from its ledger while it runs."""
    run_dir = resolve_run(run, run_root)
    summary = read_summary(run_dir) or {
        "run_id": run_dir.name,
        "status": "Queued",
        "status_reason": "not started",
        "run_dir": str(run_dir),
    }
    if summary["status"] in ACTIVE and (ended := _driver_ended(run_dir, summary)):
        summary = read_summary(run_dir) or summary  # the driver may have written its end meanwhile
        if summary["status"] in ACTIVE:
            summary["status"], summary["status_reason"] = ended
    if ray_job := read_ray_job(run_dir):
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


def _driver_ended(run_dir: Path, summary: dict[str, Any]) -> tuple[str, str] | None:
    """(status, reason) of a run said to be active whose driver is gone; None while it runs (or where
    nobody can tell: a local driver on another machine)."""
    if read_ray_job(run_dir):
        from .submit.ray_job import job_ended

        return job_ended(run_dir)
    if not driver_alive(summary):
        return "Failed", "the driver process is gone (killed, or its machine lost); rerun the step to resume it"
    return None


async def watch(
    run: str,
    run_root: str | None = None,
    interval: float = _POLL_S,
    on_error: Callable[[ParallelStepsError], None] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The run's status now and every `interval` seconds, until a final one. The reads run on a worker
    thread, so the event loop (Airflow's triggerer, a Prefect flow) stays free while a run is followed.

    Args:
        on_error: called when a status cannot be read (e.g. the Ray cluster is out of reach for a
            while), and the next poll tries again; without it, the error is raised.
    """
    while True:
        try:
            summary = await asyncio.to_thread(run_status, run, run_root)
        except ParallelStepsError as exc:
            if on_error is None:
                raise
            on_error(exc)
        else:
            yield summary
            if summary["status"] in TERMINAL:
                return
        await asyncio.sleep(interval)


def wait(
    run: str,
    run_root: str | None = None,
    timeout: float | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    stop: threading.Event | None = None,
    on_error: Callable[[ParallelStepsError], None] | None = None,
) -> dict[str, Any]:
    """Block until the run ends (or `timeout` seconds pass: TimeoutError); returns its summary.

    Args:
        on_progress: called with the live status of the running run (counts, rate, ETA).
        stop: when set (a Ctrl-C, an engine's kill), the run is canceled, once.
        on_error: as for `watch`: called when a status cannot be read, and the next poll tries again.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    canceled = False
    while True:
        try:
            summary = run_status(run, run_root)
        except ParallelStepsError as exc:
            if on_error is None:
                raise
            on_error(exc)
            summary = {"run_id": run, "status": "unknown"}
        if summary["status"] in TERMINAL:
            return summary
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"run {summary['run_id']} is still {summary['status']} after {timeout:g} s")
        if on_progress is not None and "mini_batches_done" in summary:
            on_progress(summary)
        if stop is not None and stop.is_set() and not canceled:
            canceled = True
            cancel(run, run_root, getattr(stop, "reason", "canceled by the user"))
        time.sleep(_POLL_S)


def cancel(run: str, run_root: str | None = None, reason: str = "canceled by the user") -> dict[str, Any]:
    """Ask the run's driver to stop (it notices within a second and stops every worker); a driver that
    runs as a Ray job is also stopped through the Jobs API (the job ends STOPPED)."""
    run_dir = resolve_run(run, run_root)
    summary = run_status(str(run_dir))
    if summary["status"] in TERMINAL:
        raise ParallelStepsError(f"run {summary['run_id']} already ended: {summary['status']}")
    request_cancel(run_dir, reason)
    if read_ray_job(run_dir):
        from .submit.ray_job import stop_job

        stop_job(run_dir)
    return summary


# Logs -------------------------------------------------------------------------------------


def logs(
    run: str,
    run_root: str | None = None,
    mini_batch: int | None = None,
    stderr: bool = False,
    follow: bool = False,
) -> Iterator[str]:
    """The driver's log (`master_role.txt`), or workers' stderr, or everything about one mini-batch;
    with `follow`, keep printing new lines until the run ends."""
    run_dir = resolve_run(run, run_root)
    run_logs = RunLogs(run_dir, create=False)
    if mini_batch is None:
        yield from run_logs.follow(stderr, follow, lambda: run_status(str(run_dir))["status"] in TERMINAL)
        return
    ledger = Ledger.open_readonly(run_dir / "ledger.sqlite")
    if ledger is None:
        raise InputError(str(run_dir), "has no ledger")
    try:
        rows, attempts = ledger.rows(mini_batch), ledger.attempts(mini_batch)
    finally:
        ledger.close()
    if not rows:
        raise InputError(str(mini_batch), f"no mini-batch with this id in {run_dir}")
    row = rows[0]
    yield (
        f"mini-batch {mini_batch}: {row['state']} after {row['attempts']} attempt(s); {row['source']}\n"
        f"  items {row['items']}, returned {row['returned']}, failed items {row['items_failed']}, "
        f"worker {row['worker']}, duration {row['duration'] or 0:.3f} s\n"
    )
    for attempt in attempts:
        code = "" if attempt["exit_code"] is None else f" (exit code {attempt['exit_code']})"
        yield (
            f"  attempt {attempt['attempt']} on {attempt['worker']} (pid {attempt['pid']}): "
            f"{attempt['outcome']}{code}: {attempt['error']}\n"
        )
    workers = {w for w in [row["worker"], *(a["worker"] for a in attempts)] if w}
    yield from run_logs.mini_batch_story(mini_batch, workers, stderr)


# Listing and cleaning -----------------------------------------------------------------------


def list_runs(run_root: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
    root = default_run_root(run_root)
    if not (root / "index.sqlite").exists():
        return []
    index = RunIndex(root)
    try:
        records = index.runs(name)
    finally:
        index.close()
    for record in records:
        if record["status"] in ACTIVE and (ended := _driver_ended(Path(record["run_dir"]), record)):
            record["status"] = ended[0]
        record["summary"] = json.loads(record["summary"]) if record["summary"] else {}
    return records


def clean(
    run_root: str | None = None, older_than_s: float | None = None, keep: int | None = None, name: str | None = None
) -> list[str]:
    """Remove run directories older than `older_than_s` or beyond the `keep` newest; never a running one."""
    if older_than_s is None and keep is None:
        raise ParallelStepsError("clean needs --older-than or --keep")
    root = default_run_root(run_root)
    records = [r for r in list_runs(str(root), name) if r["status"] not in ACTIVE]
    records.sort(key=lambda r: r["started_at"] or 0, reverse=True)
    now, removed = time.time(), []
    index = RunIndex(root)
    try:
        for position, record in enumerate(records):
            too_old = (
                older_than_s is not None and now - (record["ended_at"] or record["started_at"] or now) > older_than_s
            )
            too_many = keep is not None and position >= keep
            if too_old or too_many:
                shutil.rmtree(record["run_dir"], ignore_errors=True)
                index.remove(record["run_id"])
                removed.append(record["run_id"])
    finally:
        index.close()
    return removed


def parse_age(text: str) -> float:
    """Seconds from `30s`, `15m`, `12h`, `7d` (a bare number is seconds)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not match:
        raise ParallelStepsError(f"--older-than: {text!r} is not an age (use 30s, 15m, 12h, 7d)")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
