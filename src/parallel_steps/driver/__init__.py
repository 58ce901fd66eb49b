"""The driver (the main role) and its collaborators.

dispatch.py  Driver: hands mini-batches to workers, records outcomes, commits
outcomes.py  what becomes of each attempt: ledger row, attempt log, counters, retry decision
cancel.py    when a canceled run stops: the cancel flag or request file, then a short drain
faults.py    which failed attempts are retried; errors grouped by signature
health.py    thresholds, the init() policy, no-progress timeouts
progress.py  progress snapshots and job events to files and callbacks
"""

from .cancel import CANCEL_GRACE_S
from .dispatch import Driver
from .health import threshold_breach
from .progress import EventCallback, ProgressCallback, Reporter

__all__ = [
    "CANCEL_GRACE_S",
    "Driver",
    "EventCallback",
    "ProgressCallback",
    "Reporter",
    "threshold_breach",
]
