"""The job object, like a batch service's: submit a run to the background, then find it by id or folder
and wait for it, read its logs, list and clean runs (its state and cancel are `state.py`'s).

It is built on the rest of `jobs/`: where the driver starts (`launch.py`: on this machine, or on a Ray
cluster as a Ray job, `submit_to: ray_job`), how a run's state is read and canceled (`state.py`) and how it
is followed (`follow.py`); `jobs/__init__.py` is the face of all of them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..config.model import ParallelRunConfig
from ..config.types import default_run_root
from ..errors import InputError, ParallelStepsError
from ..store.ledger import Ledger
from ..store.logs import RunLogs
from ..store.runs import ACTIVE, RunIndex
from ..summary import TERMINAL
from .follow import Follower, RunHooks, when_set
from .launch import Launcher
from .state import cancel, driver_ended, resolve_run, run_status

__all__ = ["RunHandle", "clean", "list_runs", "logs", "parse_age", "submit", "wait"]


def submit(
    config: ParallelRunConfig,
    run_id: str | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    entry_callables: bytes | None = None,
) -> RunHandle:
    """Start the step's driver in the background, where the config's `submit_to` says: a process on this
    machine that outlives the caller, or a Ray job on the cluster (`ray_job`: when the run's job is
    still running, this attaches to it instead); returns its handle at once.

    Everything that can be checked is checked here first, so a bad config or a missing
    input raises now instead of failing in the background.
    """
    launcher = Launcher(config, run_dir=run_dir, run_id=run_id, entry_callables=entry_callables)
    return RunHandle(launcher.start())


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
        on_error: called when a status cannot be read (e.g. the Ray cluster is out of reach for a
            while), and the next poll tries again; without it, the error is raised.
    """
    follower = Follower(run, _Callbacks(on_progress, on_error), run_root=run_root, retry=on_error is not None)
    return follower.wait(when_set(stop), timeout)


class _Callbacks(RunHooks):
    """`wait`'s callbacks as follower hooks."""

    def __init__(
        self,
        on_progress: Callable[[dict[str, Any]], None] | None,
        on_error: Callable[[ParallelStepsError], None] | None,
    ):
        self.on_progress, self.on_error = on_progress, on_error

    def progress(self, snapshot: Mapping[str, Any]) -> None:
        if self.on_progress is not None:
            self.on_progress(dict(snapshot))

    def unreadable(self, error: ParallelStepsError) -> None:
        if self.on_error is not None:
            self.on_error(error)


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
        if record["status"] in ACTIVE and (ended := driver_ended(Path(record["run_dir"]), record)):
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
