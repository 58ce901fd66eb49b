"""Job control, the one face the front ends use: where a step's driver runs and starting it there
(`Launcher`), following a run elsewhere (`Follower`, `RunHooks`), a run's state, and the job object
(`submit`, `RunHandle`, `wait`, `cancel`, `logs`, `list_runs`, `clean`).

Names load on first use: `python -m parallel_steps.jobs.detached` and the Ray job's entrypoint
(`ray_job_entry.py`, standard library only) start through this package and must not pay for the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Launcher": ".launch",
    "Follower": ".follow",
    "RunHooks": ".follow",
    "StopCheck": ".follow",
    "finished": ".follow",
    "when_set": ".follow",
    "cancel": ".state",
    "driver_ended": ".state",
    "resolve_run": ".state",
    "run_status": ".state",
    "RunHandle": ".handle",
    "clean": ".handle",
    "list_runs": ".handle",
    "logs": ".handle",
    "parse_age": ".handle",
    "submit": ".handle",
    "wait": ".handle",
}
__all__ = [
    "Follower",
    "Launcher",
    "RunHandle",
    "RunHooks",
    "StopCheck",
    "cancel",
    "clean",
    "driver_ended",
    "finished",
    "list_runs",
    "logs",
    "parse_age",
    "resolve_run",
    "run_status",
    "submit",
    "wait",
    "when_set",
]

if TYPE_CHECKING:
    from .follow import Follower, RunHooks, StopCheck, finished, when_set
    from .handle import RunHandle, clean, list_runs, logs, parse_age, submit, wait
    from .launch import Launcher
    from .state import cancel, driver_ended, resolve_run, run_status


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
