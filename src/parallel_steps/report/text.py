"""What every front end prints of a run: the one progress text (the CLI's stderr, an Airflow task log,
a Prefect artifact), the last line once it has ended, and how often a log that is not live gets a line.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any


def progress_line(snapshot: Mapping[str, Any]) -> str:
    """The one progress text of the CLI, a task log and a Prefect artifact, e.g. `12/40 mini-batches
    done (11 succeeded, 1 failed, 0 reused); items 55 succeeded, 5 failed; 2.50 mini-batches/s; ETA 11 s`."""
    return f"{mini_batches_done(snapshot)}; {items_and_rate(snapshot)}"


def mini_batches_done(snapshot: Mapping[str, Any]) -> str:
    return (
        f"{snapshot.get('mini_batches_done', 0)}/{snapshot.get('mini_batches_total', 0)} mini-batches done "
        f"({snapshot.get('mini_batches_succeeded', 0)} succeeded, {snapshot.get('mini_batches_failed', 0)} failed, "
        f"{snapshot.get('mini_batches_reused', 0)} reused)"
    )


def items_and_rate(snapshot: Mapping[str, Any]) -> str:
    """The part of the progress text after the mini-batch counts (the CLI's bar shows those itself)."""
    eta = snapshot.get("eta_s")
    return (
        f"items {items_text(snapshot)}; "
        f"{snapshot.get('rate_per_s') or 0.0:.2f} mini-batches/s; ETA {'unknown' if eta is None else f'{eta:.0f} s'}"
    )


def items_text(summary: Mapping[str, Any]) -> str:
    """`12 succeeded, 1 failed`, and the items run() returned no result for when they are not failures
    (error_threshold -1: a script that writes its own files returns nothing), so that such a run does not
    read as failed."""
    text = f"{summary.get('items_succeeded', 0)} succeeded, {summary.get('items_failed', 0)} failed"
    if summary.get("items_without_result"):
        text += f", {summary['items_without_result']} returned no result (error_threshold -1: not failures)"
    return text


def end_line(summary: Mapping[str, Any]) -> str:
    """The last progress text, once the run has ended (also when no worker ran: the step was reused)."""
    done = summary.get("mini_batches_succeeded", 0) + summary.get("mini_batches_failed", 0)
    reused = " (reused)" if summary.get("reused") else ""
    return (
        f"{done}/{summary.get('mini_batches_total', 0)} mini-batches done; "
        f"{summary.get('status')}{reused}: {summary.get('status_reason')}"
    )


class Throttle:
    """At most one progress line per `interval` seconds; the first and the last (every mini-batch done)
    always. For logs and terminals that are not live; an artifact takes every snapshot."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic):
        self.interval, self._clock, self._last = interval, clock, -math.inf

    def due(self, snapshot: Mapping[str, Any]) -> bool:
        now = self._clock()
        running = snapshot.get("mini_batches_done", 0) < snapshot.get("mini_batches_total", 0)
        if running and now - self._last < self.interval:
            return False
        self._last = now
        return True
