"""A driver in the background: what it is handed in its run directory, and its process,
`python -m parallel_steps.jobs.detached RUN_DIR RUN_ID`.

The submitting side (`start`, `prepare`; called by `jobs/launch.py` and `jobs/ray_job.py`) writes the
step (secrets masked; their values travel in this process's environment, or, for a Ray job, whose
runtime environment the dashboard shows, in a file only its owner can read, which the driver removes
once read: `hand_secrets`), the entry functions if any, and a queued summary. The process runs that
step until it ends; SIGTERM cancels it (a second SIGTERM stops it at once). The same entry runs
on this machine (`submit_to: local`) and on a Ray cluster as a Ray job (`ray_job`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from ..config.model import ParallelRunConfig
from ..config.secrets import public_config, secret_fields
from ..control import Cancel, exit_when_overdue
from ..errors import StepFailed
from ..run.step import run_step
from ..store.runs import (
    CALLABLES_FILE,
    SECRETS_FILE,
    STEP_FILE,
    RunIndex,
    cancel_requested,
    read_summary,
    write_summary,
)
from ..store.space import write_site
from ..summary import RunSummary

#: The environment variable through which a detached run gets the fields step.json holds masked
#: (`environment_variables`, `storage_options`, URLs with credentials), so no secret is written to the run directory.
ENVIRONMENT_VARIABLE = "PARALLEL_STEPS_DETACHED_ENVIRONMENT"


# The submitting side ------------------------------------------------------------------------


def start(config: ParallelRunConfig, run_dir: Path, run_id: str, entry_callables: bytes | None) -> None:
    """Start the driver as a process on this machine that outlives the caller (its output: driver.log)."""
    prepare(config, run_dir, run_id, entry_callables)
    env = {**os.environ, ENVIRONMENT_VARIABLE: json.dumps(secret_fields(config))}
    write_site("detached", run_dir / "driver.log")
    with open(run_dir / "driver.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "parallel_steps.jobs.detached", str(run_dir), run_id],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    register(config, run_dir, run_id, pid=process.pid)


def prepare(config: ParallelRunConfig, run_dir: Path, run_id: str, entry_callables: bytes | None) -> None:
    """What a detached driver reads in its run directory: the step (secrets masked), the entry functions
    (if any) and a queued summary."""
    write_site("detached", run_dir / STEP_FILE)
    (run_dir / STEP_FILE).write_text(json.dumps(public_config(config)))
    callables = run_dir / CALLABLES_FILE
    if entry_callables is None:
        callables.unlink(missing_ok=True)
    else:
        callables.write_bytes(entry_callables)
    queued(run_dir, run_id, config.name, pid=None)


def hand_secrets(run_dir: Path, fields: dict[str, object]) -> None:
    """Leave the masked fields' values for a driver that cannot be given them in its environment (a Ray
    job): a file only this user can read (created so, never wider for a moment), read once and removed."""
    path = run_dir / SECRETS_FILE
    write_site("ray_job", path)
    tmp = path.with_name(f".{SECRETS_FILE}.{os.getpid()}.tmp")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(fields, file)
    os.replace(tmp, path)


def withdraw_secrets(run_dir: Path) -> None:
    """Remove the handed secrets of a driver that will not start (its job was refused)."""
    (run_dir / SECRETS_FILE).unlink(missing_ok=True)


def _taken_secrets(run_dir: Path) -> dict[str, object]:
    """The masked fields' values: from this process's environment (a detached run), or the file a Ray job
    was handed, removed as soon as it is read."""
    if ENVIRONMENT_VARIABLE in os.environ:
        return dict(json.loads(os.environ.pop(ENVIRONMENT_VARIABLE)))
    path = run_dir / SECRETS_FILE
    try:
        fields = dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return {}
    path.unlink(missing_ok=True)
    return fields


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


# The process ---------------------------------------------------------------------------------


def main(run_dir: str, run_id: str) -> int:
    step = Path(run_dir, STEP_FILE)
    if not step.is_file():  # a Ray job on a node that does not mount the run root
        print(
            f"parallel-steps: the run directory {run_dir} is not visible on {socket.gethostname()}: put run_root "
            "on storage that the submitting machine and every Ray node mount at the same path",
            file=sys.stderr,
        )
        return 2
    data = json.loads(step.read_text())
    data.update(_taken_secrets(Path(run_dir)))  # the fields step.json holds masked
    config = ParallelRunConfig.model_validate(data)
    callables = Path(run_dir, CALLABLES_FILE)
    entry_callables = callables.read_bytes() if callables.exists() else None
    queued(Path(run_dir), run_id, config.name, pid=os.getpid())  # now `status` can tell if it dies
    cancel = Cancel()

    def terminate(*_: object) -> None:
        cancel.cancel(cancel_requested(Path(run_dir)) or "canceled by the user (SIGTERM)")
        exit_when_overdue(cancel, config.termination_grace)

    signal.signal(signal.SIGTERM, terminate)
    try:
        run_step(config, run_dir=run_dir, run_id=run_id, cancel=cancel, entry_callables=entry_callables)
    except StepFailed:
        return 1
    except Exception as exc:  # found in the background (e.g. an input error): the run failed with it
        summary = dict(read_summary(Path(run_dir)) or {}, status="Failed", status_reason=f"{type(exc).__name__}: {exc}")
        write_summary(Path(run_dir), summary)
        print(f"parallel-steps: {summary['status_reason']}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
