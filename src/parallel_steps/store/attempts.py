"""Attempts as aligned columns: what `processed_mini-batches.csv` holds, one list per column.

The driver keeps this invocation's attempts (`AttemptLog`) as it writes the file
(`RunLogs.record_attempt`), and its report reads them from there rather than parsing the file back
(most of a large run's report time). The report of a run folder made later (`parallel-steps
report`) reads the same columns from the file (report/records.py).
"""

from __future__ import annotations

import array
import functools
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field, fields


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

    def extend(self, other: Attempts) -> None:
        for f in fields(self):
            getattr(self, f.name).extend(getattr(other, f.name))

    def select(self, indices: Iterable[int]) -> Attempts:
        """The attempts at `indices`, in their order."""
        indices = list(indices)
        return Attempts(*(list(map(getattr(self, f.name).__getitem__, indices)) for f in fields(self)))


class AttemptLog:
    """The attempts of this invocation as its driver records them: the numbers in arrays, 8 bytes each
    (a run of a million files holds 100,000 attempts until its report), times to the millisecond as
    processed_mini-batches.csv has them."""

    def __init__(self) -> None:
        self._mini_batch, self._attempt = array.array("q"), array.array("q")
        self._start, self._duration = array.array("d"), array.array("d")
        self._worker: list[str] = []
        self._items: list[int | None] = []
        self._items_succeeded: list[int | None] = []
        self._outcome: list[str] = []
        self._error: list[str] = []

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
        self._mini_batch.append(mini_batch)
        self._attempt.append(attempt)
        self._worker.append(worker)
        self._items.append(items)
        self._items_succeeded.append(items_succeeded)
        self._outcome.append(outcome)
        self._start.append(start)
        self._duration.append(duration)
        self._error.append(error)

    def columns(self) -> Attempts:
        """The attempts as the file reads them back, outcomes as plain text."""
        return Attempts(
            mini_batch=self._mini_batch.tolist(),
            attempt=self._attempt.tolist(),
            worker=list(self._worker),
            items=list(self._items),
            items_succeeded=list(self._items_succeeded),
            outcome=list(map(str, self._outcome)),  # a LossReason is written as its value
            start=self._start.tolist(),
            duration=self._duration.tolist(),
            error=list(self._error),
        )
