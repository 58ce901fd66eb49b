"""What a local worker tells its pool: finished results in small batches, and what happens while one runs.

Results of quick mini-batches travel together (one message per few milliseconds, not one per
mini-batch); a failure, a long one or an empty queue sends at once. Before results leave, what
they point at (their spool slices, the log lines) is flushed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...protocol import FromWorker, Outcome, WorkerHangTimeout, WorkerLoaded, WorkerResults
from .frames import WorkerEnd

_BATCH_S = 0.02  # the longest a finished result waits for company
_BATCH_MAX = 32


class Outbox:
    """Finished results, sent together when the queue runs dry or a few milliseconds later at most, and what
    the entry script causes while it runs an attempt, after them."""

    #: A mini-batch quicker than this is followed by more of its kind: its result may wait.
    QUICK_S = 0.005

    def __init__(self, conn: WorkerEnd, flush: Callable[[list[Outcome]], None]):
        self.conn, self.flush, self.since = conn, flush, 0.0
        self.items: list[tuple[int, Outcome]] = []
        self.index, self.attempt = -1, 0  # the attempt it runs (one at a time)

    def add(self, index: int, outcome: Outcome) -> None:
        if not self.items:
            self.since = time.monotonic()
        self.items.append((index, outcome))

    def due(self) -> bool:
        return len(self.items) >= _BATCH_MAX or time.monotonic() - self.since >= _BATCH_S

    def send_after(self, outcome: Outcome, queued: bool) -> None:
        """Send what waits after `outcome` was added, unless it may wait for company: a quick success while
        more mini-batches are `queued`. A quick result waits for the next mini-batch to end, so one that runs
        long holds it back (status lags, and a crash or timeout of that one runs it again: the ledger holds
        only what the pool was told)."""
        if not queued or not outcome.ok or outcome.duration >= self.QUICK_S or self.due():
            self.send()

    def send(self, message: FromWorker | None = None) -> None:
        """Flush the batch, then send `message` (so the pool sees what happened in order)."""
        if self.items:
            self.flush([outcome for _, outcome in self.items])  # what the results point at, before them
            self.conn.send(WorkerResults(self.items))
            self.items = []
        if message is not None:
            self.conn.send(message)

    def loaded(self, items: int) -> None:
        self.loaded_of(self.index, self.attempt, items)

    def loaded_of(self, index: int, attempt: int, items: int) -> None:
        self.send(WorkerLoaded(index, attempt, items))

    def hang_timeout(self, seconds: float | None) -> None:
        self.send(WorkerHangTimeout(self.index, self.attempt, seconds))
