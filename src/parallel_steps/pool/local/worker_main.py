"""The local worker process: `python -m parallel_steps.pool.local.worker_main FD PARENT_PID MARKER`.

A short loop in the spirit of concurrent.futures' `_process_worker`: receive the
spec, init once, then run the mini-batches it is given in order. Results of
quick mini-batches travel in small batches (one message per few milliseconds,
not one per mini-batch); the marker tells the pool which mini-batch runs now
and since when, so deadlines stay exact and a crash is blamed on the right
one. A watchdog thread ends the worker (and its children) when the driver is
gone, so even a SIGKILLed driver leaves no orphans.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from ...host import end_process
from ...inputs.minibatch import MiniBatch
from ...protocol import (
    FromWorker,
    Outcome,
    RunAttempts,
    StopWorker,
    ToWorker,
    WorkerHangTimeout,
    WorkerInitFailed,
    WorkerLoaded,
    WorkerReady,
    WorkerResults,
)
from ...worker.runtime import InitError, WorkerRuntime, localize_side_inputs
from .frames import WorkerEnd
from .marker import Marker
from .process import TMPDIR_VARIABLE

_PARENT_POLL_S = 0.5
_BATCH_S = 0.02  # the longest a finished result waits for company
_BATCH_MAX = 32
_QUICK_S = 0.005  # a mini-batch quicker than this is followed by more of its kind: its result may wait


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(_PARENT_POLL_S)
        if os.getppid() != parent_pid:
            # Our process group holds the worker and whatever it started.
            os.killpg(os.getpgid(0), signal.SIGKILL)


class _Outbox:
    """What the worker tells the pool: finished results, sent together when the queue runs dry or a few
    milliseconds later at most, and what the entry script causes while it runs an attempt, after them."""

    def __init__(self, conn: WorkerEnd, flush: Callable[[list[Outcome]], None]):
        self.conn, self.flush, self.since = conn, flush, 0.0
        self.items: list[tuple[int, Outcome]] = []
        self.index, self.attempt = -1, 0  # the attempt it runs

    def add(self, index: int, outcome: Outcome) -> None:
        if not self.items:
            self.since = time.monotonic()
        self.items.append((index, outcome))

    def due(self) -> bool:
        return len(self.items) >= _BATCH_MAX or time.monotonic() - self.since >= _BATCH_S

    def send(self, message: FromWorker | None = None) -> None:
        """Flush the batch, then send `message` (so the pool sees what happened in order)."""
        if self.items:
            self.flush([outcome for _, outcome in self.items])  # what the results point at, before them
            self.conn.send(WorkerResults(self.items))
            self.items = []
        if message is not None:
            self.conn.send(message)

    def loaded(self, items: int) -> None:
        self.send(WorkerLoaded(self.index, self.attempt, items))

    def hang_timeout(self, seconds: float | None) -> None:
        self.send(WorkerHangTimeout(self.index, self.attempt, seconds))


def main(fd: int, parent_pid: int, marker_fd: int) -> int:
    tempfile.tempdir = os.environ.get(TMPDIR_VARIABLE) or tempfile.tempdir  # as the driver resolved it
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="watch-parent").start()
    conn, marker = WorkerEnd(socket.socket(fileno=fd)), Marker(marker_fd)
    spec = conn.recv()
    try:
        spec = localize_side_inputs(spec, copy_paths=False)  # local paths are read in place
    except Exception as exc:
        conn.send(WorkerInitFailed(f"side inputs could not be copied: {type(exc).__name__}: {exc}", os.getpid()))
        return 3
    runtime = WorkerRuntime(spec, hang_timeout_hook=lambda seconds: outbox.hang_timeout(seconds))
    outbox = _Outbox(conn, runtime.flush)
    try:
        runtime.start()
    except InitError as exc:
        conn.send(WorkerInitFailed(str(exc), os.getpid()))
        return 3
    conn.send(WorkerReady(os.getpid()))
    queue: collections.deque[tuple[MiniBatch, int]] = collections.deque()
    while True:
        try:
            # Block only when there is nothing to run; else look for messages between batches of results.
            while not queue or (not outbox.items and conn.waiting()):
                if not queue:
                    outbox.send()
                message: ToWorker = conn.recv()
                if isinstance(message, StopWorker):
                    runtime.shutdown()
                    return 0
                if isinstance(message, RunAttempts):
                    queue.extend(message.attempts)
        except EOFError:
            break
        mini_batch, attempt = queue.popleft()
        outbox.index, outbox.attempt = mini_batch.index, attempt
        marker.set(mini_batch.index, time.monotonic())
        upcoming = queue[0][0] if queue else None  # its input is read while this one runs
        outcome = runtime.run(mini_batch, attempt, on_loaded=outbox.loaded, upcoming=upcoming)
        marker.clear()
        outbox.add(mini_batch.index, outcome)
        # A failure is reported at once; results wait for company only while mini-batches are quick. A quick
        # result waits for the next mini-batch to end, so one that runs long holds it back (status lags, and
        # a crash or timeout of that one runs it again: the ledger holds only what the pool was told).
        if not queue or not outcome.ok or outcome.duration >= _QUICK_S or outbox.due():
            outbox.send()
    runtime.shutdown()
    return 0


if __name__ == "__main__":
    end_process(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])), close_files=True)  # no teardown
