"""The driver (the main role) and its collaborators.

dispatch.py  Driver: hands mini-batches to workers, records outcomes, commits
outcomes.py  what becomes of each attempt: ledger row, attempt log, counters, retry decision
cancel.py    when a canceled run's loop stops: the cancel, then a short drain
termination.py  the termination contract: every phase of a canceled run ends within termination_grace
faults.py    which failed attempts are retried; errors grouped by signature
health.py    thresholds, the init() policy, no-progress timeouts
progress.py  progress snapshots and job events to files and callbacks
worker_time.py  each worker's time in run(), waiting for input, and idle
"""

from .dispatch import Driver
from .health import threshold_breach
from .progress import EventCallback, ProgressCallback, Reporter
from .termination import Termination
from .worker_time import WorkerTime

__all__ = [
    "Driver",
    "EventCallback",
    "ProgressCallback",
    "Reporter",
    "Termination",
    "WorkerTime",
    "threshold_breach",
]
