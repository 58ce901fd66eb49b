"""The background process of a submitted run: `python -m parallel_steps.detached RUN_DIR RUN_ID`.

It runs the step saved in the run directory (`step.json`, secrets masked; their values come
in this process's environment from `jobs.submit`) until it ends; SIGTERM cancels it (a
second SIGTERM stops it at once).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from .config import ParallelRunConfig
from .control import Cancel
from .errors import StepFailed
from .jobs import ENVIRONMENT_VARIABLE, queued
from .step import run_step
from .store.runs import STEP_FILE, read_summary, write_summary


def main(run_dir: str, run_id: str) -> int:
    data = json.loads(Path(run_dir, STEP_FILE).read_text())
    data["environment_variables"] = json.loads(os.environ.pop(ENVIRONMENT_VARIABLE, "{}"))
    config = ParallelRunConfig.model_validate(data)
    queued(Path(run_dir), run_id, config.name, pid=os.getpid())  # now `status` can tell if it dies
    cancel = Cancel()
    signal.signal(signal.SIGTERM, lambda *_: cancel.cancel("canceled by the user (SIGTERM)"))
    try:
        run_step(config, run_dir=run_dir, run_id=run_id, cancel=cancel)
    except StepFailed:
        return 1
    except Exception as exc:  # found in the background (e.g. an input error): the run failed with it
        summary = dict(read_summary(Path(run_dir)) or {}, status="Failed", status_reason=f"{type(exc).__name__}: {exc}")
        write_summary(Path(run_dir), summary)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
