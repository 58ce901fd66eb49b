"""Where each worker's time went, from the moment it was ready (its `init()` done) until the run's end or
its loss: in `run()` (with writing what it returned), waiting for its input (read, or its read-ahead to end),
or idle (waiting for the driver: nothing left to run, or results still being committed).

The attempts say when each started, how long it took and how much of it was spent waiting for input
(`Outcome.input_s`); idle is the rest. A worker with several mini-batches in flight (`async def run`) is
busy while any is: only the time an attempt adds to what the worker's earlier ones covered counts. The shares go into the run's summary (`worker_time` in run.json) and onto its report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class _Worker:
    ready: float  # Unix seconds
    ended: float | None = None
    run_s: float = 0.0
    input_s: float = 0.0
    busy_until: float = 0.0  # the end of the latest attempt counted (the worker's clock)

    def times(self, now: float) -> dict[str, float]:
        alive = max(0.0, (self.ended or now) - self.ready)
        idle = max(0.0, alive - self.run_s - self.input_s)
        return dict(alive_s=alive, run_s=self.run_s, input_s=self.input_s, idle_s=idle)


class WorkerTime:
    """Each worker's time in run(), waiting for input and idle; one per step, over its restarts."""

    def __init__(self) -> None:
        self._workers: dict[str, _Worker] = {}
        self._earlier: dict[str, dict[str, float]] = {}  # of workers of an earlier pool (a restart)

    def ready(self, worker: str, at: float) -> None:
        self._workers[worker] = _Worker(at)

    def attempt(self, worker: str, started: float, duration: float, input_s: float) -> None:
        if (entry := self._workers.get(worker)) is None:
            return
        end = started + duration
        new = min(duration, max(0.0, end - max(started, entry.busy_until)))  # not covered by earlier attempts
        entry.busy_until = max(entry.busy_until, end)
        waiting = input_s / duration if duration > 0 else 0.0
        entry.run_s += new * (1 - waiting)
        entry.input_s += new * waiting

    def ended(self, worker: str, at: float) -> None:
        if (entry := self._workers.get(worker)) and entry.ended is None:
            entry.ended = at

    def end_all(self, at: float) -> None:
        """The pool's workers are done (the run ended, or restarts with a new pool): count them as such."""
        for worker, entry in self._workers.items():
            times = entry.times(at)
            earlier = self._earlier.setdefault(worker, dict.fromkeys(times, 0.0))
            for key, value in times.items():
                earlier[key] += value
        self._workers.clear()

    def summary(self) -> dict[str, Any]:
        """`{run_share, input_share, idle_share, workers: {id: {alive_s, run_s, input_s, idle_s}}}` of the ended
        workers; shares of the time all of them were alive (None when none was)."""
        workers = {
            worker: {key: round(value, 3) for key, value in times.items()} for worker, times in self._earlier.items()
        }
        alive = sum(times["alive_s"] for times in self._earlier.values())

        def share(key: str) -> float | None:
            return round(sum(times[key] for times in self._earlier.values()) / alive, 4) if alive else None

        return dict(run_share=share("run_s"), input_share=share("input_s"), idle_share=share("idle_s"), workers=workers)
