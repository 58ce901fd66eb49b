"""The run() timeouts of the mini-batches an `async def run` has in flight, kept by the worker itself.

Each mini-batch in flight runs inside its own `asyncio.timeout`, counted from its start (its
input's read included); past it the coroutine is cancelled and the attempt ends timed out while
the others go on. `context.hang_timeout(seconds)` called from one of them moves that one's limit.
The pool only watches the earliest deadline (`deadline`), to end a worker whose blocked event loop
cannot cancel anything (pool/slots.py's backstop).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio


@dataclass
class Limit:
    """One mini-batch's run() timeout: its scope, its length in seconds (None: none), the task it bounds."""

    scope: asyncio.Timeout
    seconds: float | None
    task: asyncio.Task[Any] | None


class Limits:
    """The limits of the mini-batches in flight, by index. `on_change` is told when one starts, ends or moves."""

    def __init__(self) -> None:
        self._by_index: dict[int, Limit] = {}
        self.on_change: Callable[[], None] | None = None

    @contextlib.asynccontextmanager
    async def bound(self, index: int, seconds: float | None) -> AsyncIterator[Limit]:
        """Run the block within `seconds` from now (None: no limit); TimeoutError past it (`expired()` says
        the limit, not the script, raised it)."""
        import asyncio  # only workers with an `async def run` import it

        async with asyncio.timeout(seconds) as scope:
            self._by_index[index] = limit = Limit(scope, seconds, asyncio.current_task())
            self._changed()
            try:
                yield limit
            finally:
                del self._by_index[index]
                self._changed()

    def deadline(self) -> float | None:
        """The earliest deadline in flight (loop time, which is `time.monotonic()`); None when none has one."""
        return min(
            (when for limit in self._by_index.values() if (when := limit.scope.when()) is not None), default=None
        )

    def move(self, seconds: float | None) -> bool:
        """`hang_timeout(seconds)` from the task of a mini-batch in flight: its limit becomes `seconds` from now
        (None: none; negative: its run() timeout again). False when no such task calls (a script that is not
        async, or init()): the pool keeps that limit."""
        if not self._by_index:
            return False
        import asyncio

        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running event loop
            return False
        limit = next((limit for limit in self._by_index.values() if limit.task is task), None)
        if limit is None:
            return False
        if seconds is not None and seconds < 0:
            seconds = limit.seconds
        limit.scope.reschedule(None if seconds is None else asyncio.get_running_loop().time() + seconds)
        limit.seconds = seconds
        self._changed()
        return True

    def _changed(self) -> None:
        if self.on_change:
            self.on_change()
