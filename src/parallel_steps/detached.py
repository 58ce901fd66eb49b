"""The background process of a submitted run: `python -m parallel_steps.detached RUN_DIR RUN_ID`.

It runs the step saved in the run directory (`step.json`, secrets masked; their values come
in this process's environment from `jobs.submit`, or from the Ray job's runtime environment)
until it ends; SIGTERM cancels it (a second SIGTERM stops it at once). The same entry runs on
this machine (`submit_to: local`) and on a Ray cluster as a Ray job (`ray_job`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

from .config import ParallelRunConfig
from .control import Cancel
from .errors import StepFailed
from .jobs import ENVIRONMENT_VARIABLE, queued
from .step import run_step
from .store.runs import CALLABLES_FILE, STEP_FILE, cancel_requested, read_summary, write_summary


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
    data.update(json.loads(os.environ.pop(ENVIRONMENT_VARIABLE, "{}")))  # the fields step.json holds masked
    config = ParallelRunConfig.model_validate(data)
    callables = Path(run_dir, CALLABLES_FILE)
    entry_callables = callables.read_bytes() if callables.exists() else None
    queued(Path(run_dir), run_id, config.name, pid=os.getpid())  # now `status` can tell if it dies
    cancel = Cancel()
    signal.signal(
        signal.SIGTERM,
        lambda *_: cancel.cancel(cancel_requested(Path(run_dir)) or "canceled by the user (SIGTERM)"),
    )
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
