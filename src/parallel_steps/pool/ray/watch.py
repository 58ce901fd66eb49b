"""Inside a Ray actor: what it tells its pool about the mini-batch it runs while a call goes on, and its stack dumps.

A call carries several mini-batches (pool/ray/handle.py) and returns their outcomes together: while they
are quick the pool hears nothing of them one by one, which is the point (Ray's cost is per call). What
the pool must know, it is told, through the mailbox:

- a mini-batch that has run longer than a quick one does (`SAY_AFTER_S`, or half its timeout if less) is
  said to run by the watchdog thread (`WorkerRunning`, with how long it has run), once: the pool then
  counts its deadline from its start and blames a loss on it. One whose script changes its hang timeout
  says so at once (`WorkerHangTimeout`), which says it runs too.
- once a mini-batch is said to run, what happens to it goes at once (items loaded, a hang timeout, memory
  above the limit), and the actor tells its end (`WorkerEnded`, actor.py) before it starts the next.
- a call of one mini-batch needs no saying: the call is the pool's news that it runs, as before.

faulthandler writes the stacks of a run() past its deadline: armed per call for the sum of its timeouts
(the pool's bound for a call whose runs say nothing, `Slot.start_call`), then, for one said to run, for
its own deadline.
"""

from __future__ import annotations

import faulthandler
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from ...protocol import ActorPost, WorkerHangTimeout, WorkerLoaded, WorkerOverMemory, WorkerRunning
from ..base import tree_rss
from ..slots import MEMORY_CHECK_S, budget

#: The actor's own stack dump fires this long after its deadline, so that it follows the header the pool
#: writes at the deadline (as the pool sees it); the pool kills it `slots.DUMP_GRACE_S` after that.
DUMP_DELAY_S = 0.5
#: A mini-batch of a call of several that has run this long (or half its timeout, if less) is said to run: well
#: before its deadline, and beyond what a quick one takes (the driver sends several per call only while they
#: take less than 50 ms).
SAY_AFTER_S = 1.0
_TICK_S = 0.05  # how often the watchdog looks: a say is late by this much at most


@dataclass(slots=True)
class _Run:
    """The mini-batch the actor runs, as its watchdog sees it."""

    index: int
    attempt: int
    timeout: float | None
    started: float
    said: bool  # the pool knows that it runs: its call carries only it, or it was told
    items: int | None = None  # counted before it was said to run: told with it

    def say_at(self) -> float:
        return self.started + (min(SAY_AFTER_S, self.timeout / 2) if self.timeout else SAY_AFTER_S)


class Watch:
    """The mini-batch a worker actor runs, its watchdog thread (saying long runs, sampling memory against
    `memory_limit`) and its stack dumps. The actor's main thread calls the methods; the watchdog reads what
    they set, under one lock."""

    def __init__(self, post: Callable[[ActorPost], None], dump_file: TextIO | None, memory_limit: int | None):
        self._post, self._dump_file, self._memory_limit = post, dump_file, memory_limit
        self._lock = threading.Lock()
        self._run: _Run | None = None
        self._timeouts: list[float | None] = []  # of the call's mini-batches, in order
        threading.Thread(target=self._watch, daemon=True, name="parallel-steps-watch").start()

    def call(self, timeouts: list[float | None]) -> None:
        """A call of mini-batches with these run() timeouts starts: its stacks are dumped if it outlives their sum."""
        self._timeouts = timeouts
        self.arm(budget(timeouts))

    def begin(self, position: int, index: int, attempt: int) -> None:
        """The call's mini-batch at `position` starts."""
        run = _Run(index, attempt, self._timeouts[position], time.monotonic(), said=len(self._timeouts) == 1)
        with self._lock:
            self._run = run

    def end(self, position: int) -> bool:
        """The mini-batch at `position` ended. Returns whether it was said to run in a call of several: then the
        actor tells its end, and the rest of the call is armed for the sum of its own timeouts."""
        with self._lock:
            run, self._run = self._run, None
            if run is None or not run.said or len(self._timeouts) == 1:
                return False
            self.arm(budget(self._timeouts[position + 1 :]))
            return True

    def idle(self) -> None:
        """The call ended (returned or raised): nothing runs, no dump is due."""
        with self._lock:
            self._run = None
        faulthandler.cancel_dump_traceback_later()

    def loaded(self, items: int) -> None:
        """The mini-batch's data is loaded and counted: told now if the pool knows it runs, else when it is said."""
        with self._lock:
            run = self._run
            if run is not None and run.said:
                self._post(WorkerLoaded(run.index, run.attempt, items))
            elif run is not None:
                run.items = items

    def hang_timeout(self, seconds: float | None) -> None:
        """The script gave the run() it runs `seconds` from now (None: no limit; negative: its timeout again): its
        stacks are dumped past that, and the pool is told at once."""
        with self._lock:
            run = self._run
            if run is not None:
                self.arm(run.timeout if seconds is not None and seconds < 0 else seconds)
                self._say(run, WorkerHangTimeout(run.index, run.attempt, seconds))

    def arm(self, seconds: float | None) -> None:
        """Dump every thread's stack `seconds` from now (and `DUMP_DELAY_S`) instead of when armed before."""
        arm_dump(self._dump_file, seconds)

    def _say(self, run: _Run, message: ActorPost) -> None:
        """Tell the pool `message` about `run`; the first time, with what was kept until it was said to run."""
        self._post(message)
        if not run.said and run.items is not None:
            self._post(WorkerLoaded(run.index, run.attempt, run.items))
        run.said = True

    def _watch(self) -> None:
        told: tuple[int, int] | None = None  # the run told to be above the memory limit
        next_sample = 0.0
        while True:
            time.sleep(_TICK_S)
            now = time.monotonic()
            with self._lock:
                run = self._run
                if run is not None and not run.said and now >= run.say_at():
                    self._say(run, WorkerRunning(run.index, run.attempt, now - run.started))
                    self.arm(run.started + run.timeout - now if run.timeout else None)
            if self._memory_limit and now >= next_sample:
                next_sample = now + MEMORY_CHECK_S
                told = self._check_memory(told)

    def _check_memory(self, told: tuple[int, int] | None) -> tuple[int, int] | None:
        """Tell the pool, once per run, that the run it runs went above worker_memory_limit: it kills the actor."""
        rss = tree_rss(os.getpid())
        run = self._run
        if run is None or (run.index, run.attempt) == told or rss <= (self._memory_limit or 0):
            return told
        self._post(WorkerOverMemory(run.index, run.attempt, rss))
        return run.index, run.attempt


def arm_dump(file: TextIO | None, seconds: float | None) -> None:
    """faulthandler writes every thread's stack to `file` `seconds` (and `DUMP_DELAY_S`) from now, from a thread of
    its own, which needs no GIL; one timer per process: arming again replaces it (None: no dump)."""
    faulthandler.cancel_dump_traceback_later()
    if seconds and file is not None:
        faulthandler.dump_traceback_later(seconds + DUMP_DELAY_S, file=file)
