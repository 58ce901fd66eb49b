"""Attempts as aligned columns: what `processed_mini-batches.csv` holds, one list per column.

The driver keeps this invocation's attempts so as it writes the file (`RunLogs.record_attempt`), and
its report reads them from here rather than parsing the file back (most of a large run's report
time). The report of a run folder made later (`parallel-steps report`) reads the same columns from
the file (report/records.py).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace


@dataclass
class Attempts:
    """Columns rather than an object per attempt: reading them and computing the report's series go a
    column at a time, in C where they can. Times are Unix seconds as recorded; the report makes them
    relative to its origin and puts the attempts in start order (report/records.py)."""

    mini_batch: list[int] = field(default_factory=list)
    attempt: list[int] = field(default_factory=list)
    worker: list[str] = field(default_factory=list)  # node/process
    items: list[int | None] = field(default_factory=list)
    items_succeeded: list[int | None] = field(default_factory=list)
    outcome: list[str] = field(default_factory=list)
    start: list[float] = field(default_factory=list)
    duration: list[float] = field(default_factory=list)
    error: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.start)

    @functools.cached_property
    def end(self) -> list[float]:
        return list(map(operator.add, self.start, self.duration))

    def append(
        self,
        mini_batch: int,
        attempt: int,
        worker: str,
        items: int | None,
        items_succeeded: int | None,
        outcome: str,
        start: float,
        duration: float,
        error: str,
    ) -> None:
        """One attempt, as the driver knows it (the file has its times to the millisecond: `rounded`)."""
        self.mini_batch.append(mini_batch)
        self.attempt.append(attempt)
        self.worker.append(worker)
        self.items.append(items)
        self.items_succeeded.append(items_succeeded)
        self.outcome.append(outcome)
        self.start.append(start)
        self.duration.append(duration)
        self.error.append(error)

    def rounded(self) -> Attempts:
        """The attempts as the file reads back: times to the millisecond, outcomes as plain text."""
        ms = itertools.repeat(3)
        return replace(
            self,
            outcome=list(map(str, self.outcome)),  # a LossReason is written as its value
            start=list(map(round, self.start, ms)),
            duration=list(map(round, self.duration, ms)),
        )

    def extend(self, other: Attempts) -> None:
        for f in fields(self):
            getattr(self, f.name).extend(getattr(other, f.name))

    def select(self, indices: Iterable[int]) -> Attempts:
        """The attempts at `indices`, in their order."""
        indices = list(indices)
        return Attempts(*(list(map(getattr(self, f.name).__getitem__, indices)) for f in fields(self)))
