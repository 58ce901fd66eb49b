"""The one platform check: parallel-steps runs on Linux only.

The local pool waits on workers through `os.pidfd_open`, run roots and side-input copies are
locked with `fcntl.flock`, and `parallel-steps node` ties `ray start` to its parent with
`prctl(PR_SET_PDEATHSIG)`. On another OS the entry points (the CLI, the Airflow operator,
the Prefect task, `run_step`) call `require_linux()` first, so the user reads one line
instead of a worker's traceback.
"""

from __future__ import annotations

import sys

from .errors import UnsupportedPlatform


def require_linux() -> None:
    """Raise `UnsupportedPlatform` (a `ConfigError`) unless this is Linux."""
    if not sys.platform.startswith("linux"):
        raise UnsupportedPlatform(
            "platform",
            f"{sys.platform!r} is not supported",
            "parallel-steps runs on Linux only; use a Linux machine, container or VM",
        )
