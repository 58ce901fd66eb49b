"""The mailbox of a Ray pool: one small actor on the driver's node that holds what worker actors post while
their calls run (watch.py), until the pool takes it, and the last call each of them on another
machine than the driver's ended (ends.py).

A module of its own, importing nothing of the worker: its actor's process imports only this.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...protocol import ActorPost


class Mailbox:
    """Messages workers send while a call runs; the pool keeps one `take()` in flight and wakes when it returns."""

    def __init__(self) -> None:
        self._messages: list[tuple[str, ActorPost]] = []  # (sender's worker id, message)
        self._posted = asyncio.Event()
        self._taken = 0  # take() calls that returned
        self._ended: dict[str, int] = {}  # worker id -> the number of the last call it ended

    async def post(self, worker_id: str, message: ActorPost) -> None:
        self._messages.append((worker_id, message))
        self._posted.set()

    async def ping(self) -> None:
        """Nothing: a worker's first call, so that its posts during run() find the connection open."""

    async def take(self) -> list[tuple[str, ActorPost]]:
        await self._posted.wait()
        self._posted.clear()
        self._taken += 1
        messages, self._messages = self._messages, []
        return messages

    async def ended(self, worker_id: str, call: int) -> None:
        """A worker ended its call number `call`: kept for `sync`, not taken (the pool needs it only after a loss)."""
        self._ended[worker_id] = call

    async def sync(self, worker_id: str) -> tuple[int, list[tuple[str, ActorPost]], int]:
        """How many take() calls have returned, what was posted since the last (everything posted before this
        call is in one or the other: ray_refs.RayRefs.catch_up), and the last call `worker_id` noted as ended (0:
        none; always for an actor on the driver's machine, which notes in a file: ends.py)."""
        messages, self._messages = self._messages, []
        return self._taken, messages, self._ended.get(worker_id, 0)
