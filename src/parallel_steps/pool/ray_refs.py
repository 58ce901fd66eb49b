"""What the Ray pool waits on: each actor's start(), the run() of each mini-batch sent to it, and the
mailbox's take().

One table maps every such ref to what it answers, so the pool's loop waits on all of
them in one `ray.wait` and learns, for each that is done, which worker it concerns.
The mailbox (`ray_actor.Mailbox`) carries the messages actors send while run() goes on.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import ray

from ..protocol import FromWorker
from .ray_actor import Mailbox


class Answers(enum.Enum):
    """What a ref in flight answers."""

    START = "start"  # an actor's start(): WorkerReady or WorkerInitFailed
    RUN = "run"  # an actor's run(): the Outcome of one attempt
    MAIL = "mail"  # the mailbox's take(): what actors posted while run() went on


class RayRefs:
    """Refs in flight -> (what each answers, the worker it concerns; "" for the mailbox)."""

    def __init__(self) -> None:
        self._refs: dict[Any, tuple[Answers, str]] = {}
        self.mailbox: Any = None

    def open_mailbox(self) -> None:
        """Start the mailbox on the driver's own node (it lives exactly as long as the driver can)."""
        here = ray.get_runtime_context().get_node_id()
        self.mailbox = (
            ray.remote(Mailbox)
            .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
            .remote()
        )
        self._take_mail()

    def _take_mail(self) -> None:
        self._refs[self.mailbox.take.remote()] = (Answers.MAIL, "")

    def add(self, ref: Any, answers: Answers, worker_id: str) -> None:
        self._refs[ref] = (answers, worker_id)

    def pop(self, ref: Any) -> tuple[Answers, str] | None:
        """What `ref` answers, no longer waited on; None when it was taken already."""
        return self._refs.pop(ref, None)

    def drop(self, refs: Iterable[Any]) -> None:
        for ref in refs:
            self._refs.pop(ref, None)

    def clear(self) -> None:
        self._refs.clear()

    def ready(self, timeout: float) -> list[Any]:
        """Every ref that is done, messages first (they may explain a death); when none is, wait (up to
        `timeout`) for the first one."""
        refs = list(self._refs)
        ready: list[Any]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if not ready and timeout > 0:
            ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        ready.sort(key=lambda ref: self._refs[ref][0] is not Answers.MAIL)
        return ready

    def mail(self, ref: Any) -> list[tuple[str, FromWorker]]:
        """The (sender's worker id, message) pairs a done take() of the mailbox brought; waits for the next ones."""
        self._take_mail()
        messages: list[tuple[str, FromWorker]] = ray.get(ref)
        return messages
