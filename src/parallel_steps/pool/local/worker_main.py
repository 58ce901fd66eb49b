"""The local worker process: `python -m parallel_steps.pool.local.worker_main FD PARENT_PID MARKER`.

A short loop in the spirit of concurrent.futures' `_process_worker`: receive the
spec, init once, then run the mini-batches it is given in order (an `async def run`:
several at once, in_flight.py). Results of quick mini-batches travel in small
batches (outbox.py); the marker tells the pool which mini-batch runs now
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

from ...host import end_process
from ...inputs.minibatch import MiniBatch
from ...protocol import RunAttempts, StopWorker, ToWorker, WorkerInitFailed, WorkerReady
from ...worker.runtime import InitError, WorkerRuntime
from ...worker.side_inputs import copy_failure, localize_side_inputs
from .frames import WorkerEnd
from .marker import Marker
from .outbox import Outbox
from .process import TMPDIR_VARIABLE

_PARENT_POLL_S = 0.5


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(_PARENT_POLL_S)
        if os.getppid() != parent_pid:
            # Our process group holds the worker and whatever it started.
            os.killpg(os.getpgid(0), signal.SIGKILL)


def main(fd: int, parent_pid: int, marker_fd: int) -> int:
    tempfile.tempdir = os.environ.get(TMPDIR_VARIABLE) or tempfile.tempdir  # as the driver resolved it
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="watch-parent").start()
    conn, marker = WorkerEnd(socket.socket(fileno=fd)), Marker(marker_fd)
    spec = conn.recv()
    try:
        spec = localize_side_inputs(spec, copy_paths=False)  # local paths are read in place
    except Exception as exc:
        conn.send(WorkerInitFailed(f"side inputs could not be copied: {copy_failure(exc)}", os.getpid()))
        return 3
    runtime = WorkerRuntime(spec, hang_timeout_hook=lambda seconds: outbox.hang_timeout(seconds))
    outbox = Outbox(conn, runtime.flush)
    try:
        runtime.start()
    except InitError as exc:
        conn.send(WorkerInitFailed(str(exc), os.getpid()))
        return 3
    conn.send(WorkerReady(os.getpid()))
    if runtime.is_async:  # several mini-batches in flight on one event loop
        from .in_flight import InFlight  # asyncio, imported by the workers that use it

        return InFlight(runtime, conn, marker, outbox, spec.max_concurrency).serve()
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
                    queue.extend((mini_batch, attempt) for mini_batch, attempt, _ in message.attempts)
        except EOFError:
            break
        mini_batch, attempt = queue.popleft()
        outbox.index, outbox.attempt = mini_batch.index, attempt
        marker.set(mini_batch.index, time.monotonic())
        upcoming = queue[0][0] if queue else None  # its input is read while this one runs
        outcome = runtime.run(mini_batch, attempt, on_loaded=outbox.loaded, upcoming=upcoming)
        marker.clear()
        outbox.add(mini_batch.index, outcome)
        outbox.send_after(outcome, queued=bool(queue))
    runtime.shutdown()
    return 0


if __name__ == "__main__":
    end_process(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])), close_files=True)  # no teardown
