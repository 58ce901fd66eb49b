"""The local worker's loop for an `async def run`: up to `max_concurrency_per_worker` mini-batches in flight.

One event loop (the one init() ran on, so clients it made stay usable) runs each mini-batch
as a task of `WorkerRuntime.run_async`, which keeps that mini-batch's run() timeout and
cancels it there: the worker goes on with the others. Mini-batches start in the order the
pool sent them, one the moment another ends; one the pool marks `alone` (a loss of the worker
was blamed on none of those it had in flight) starts only when none runs, and nothing starts
beside it. A thread reads the pool's messages, so the loop never waits on the socket.

The marker says which mini-batch runs while only one does, since when, and the earliest
deadline of those in flight: the pool kills the worker only when a blocked event loop lets
that pass by `slots.BACKSTOP_S`.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import math
import threading
import time
from typing import Any, cast

from ...inputs.minibatch import MiniBatch
from ...protocol import Outcome, RunAttempts, StopWorker
from ...worker.runtime import WorkerRuntime
from .frames import WorkerEnd
from .marker import Marker
from .outbox import Outbox

_NONE = -1  # the marker's index while several mini-batches run, or none


class InFlight:
    """The mini-batches one async worker was sent, those it runs, and what it tells the pool."""

    def __init__(self, runtime: WorkerRuntime, conn: WorkerEnd, marker: Marker, outbox: Outbox, concurrency: int):
        self.runtime, self.conn, self.marker, self.outbox = runtime, conn, marker, outbox
        self.concurrency = concurrency
        self.queue: collections.deque[tuple[MiniBatch, int, float | None, bool]] = collections.deque()
        self.running: dict[asyncio.Task[Outcome], tuple[int, float]] = {}  # task -> (index, since)
        self.alone = False  # what runs was sent to run alone
        runtime.limits.on_change = self._mark

    def serve(self) -> int:
        """Run what the pool sends until it says stop (0) or its end closes (0, after the script's shutdown())."""
        self.runtime.run_until_complete(self._serve())
        self.runtime.shutdown()
        return 0

    async def _serve(self) -> None:
        inbox: asyncio.Queue[object] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=_receive, args=(self.conn, loop, inbox), daemon=True, name="receive").start()
        receiving = asyncio.ensure_future(inbox.get())
        while True:
            self._start_what_fits()
            if not self.running:
                self.outbox.send()
            waiting: set[asyncio.Future[Any]] = {receiving, *self.running}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not receiving:
                    self._ended(cast("asyncio.Task[Outcome]", task))
                    continue
                message = task.result()
                if not isinstance(message, RunAttempts):  # StopWorker (it is idle) or the pool's end closed
                    await self._cancel_all()
                    return
                alone = message.alone
                self.queue.extend(
                    (mb, attempt, timeout, mb.index in alone) for mb, attempt, timeout in message.attempts
                )
                receiving = asyncio.ensure_future(inbox.get())

    def _start_what_fits(self) -> None:
        started = False
        while self.queue and len(self.running) < self.concurrency and not self.alone:
            mini_batch, attempt, timeout, alone = self.queue[0]
            if alone and self.running:
                break
            self.queue.popleft()
            self.alone = alone
            loaded = functools.partial(self.outbox.loaded_of, mini_batch.index, attempt)
            task = asyncio.ensure_future(self.runtime.run_async(mini_batch, attempt, timeout, loaded))
            self.running[task] = (mini_batch.index, time.monotonic())
            started = True
        if started:
            self._mark()

    def _ended(self, task: asyncio.Task[Outcome]) -> None:
        index, _ = self.running.pop(task)
        self.alone = False
        outcome = task.result()
        self.outbox.add(index, outcome)
        self._mark()
        self.outbox.send_after(outcome, queued=bool(self.queue))

    def _mark(self) -> None:
        """The marker: the one mini-batch that runs (else none), the oldest start, the earliest deadline."""
        if not self.running:
            self.marker.set(_NONE, 0.0, math.inf)
            return
        starts = self.running.values()
        index = next(iter(starts))[0] if len(self.running) == 1 else _NONE
        deadline = self.runtime.limits.deadline()
        self.marker.set(index, min(since for _, since in starts), math.inf if deadline is None else deadline)

    async def _cancel_all(self) -> None:
        for task in self.running:
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
        self.running.clear()


def _receive(conn: WorkerEnd, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[object]) -> None:
    """The pool's messages into the loop's inbox; None once its end is closed (after a stop, nothing more)."""
    while True:
        try:
            message: object = conn.recv()
        except (EOFError, OSError):
            message = None
        loop.call_soon_threadsafe(inbox.put_nowait, message)
        if message is None or isinstance(message, StopWorker):
            return
