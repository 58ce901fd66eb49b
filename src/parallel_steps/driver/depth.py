"""How many mini-batches each worker holds: its queue's depth, from how long mini-batches take.

One while they are long (so a slow worker never holds back the rest); about 50 ms of work when
they are short (at most 1024), so that a worker never runs dry while the driver commits (up to
tens of milliseconds when SQLite checkpoints). Reading ahead adds one behind the one that runs,
whose input is read meanwhile (worker/read_ahead.py); a worker with several in flight (`async def
run`) holds one more than those, to start the moment one ends.
"""

from __future__ import annotations

import math

_SHORT_S = 0.05  # work a worker holds, in mini-batches shorter than this


class QueueDepth:
    """A moving average of log(duration): a worker descheduled for a few ms in one mini-batch barely moves it."""

    def __init__(self, read_ahead: bool, concurrency: int):
        self._read_ahead, self._concurrency = read_ahead, concurrency
        self._log_duration: float | None = None

    def observe(self, duration: float) -> None:
        sample = math.log(max(duration, 1e-6))
        self._log_duration = sample if self._log_duration is None else 0.9 * self._log_duration + 0.1 * sample

    def depth(self) -> int:
        if self._log_duration is None:
            depth = 3 if self._read_ahead else 2
        elif (typical := math.exp(self._log_duration)) >= _SHORT_S:
            depth = 3 if self._read_ahead else 1
        else:
            depth = max(2, min(1024, int(_SHORT_S / typical) + 1))
        return max(depth, self._concurrency + 1) if self._concurrency > 1 else depth
