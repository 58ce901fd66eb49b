"""What the Ray pool waits on: each actor's start(), each call of mini-batches sent to it, and the
mailbox's take().

One table maps every such ref to what it answers, so the pool's loop waits on all of
them in one `ray.wait` and learns, for each that is done, which worker it concerns.
The mailbox (`ray_mailbox.Mailbox`) carries the messages actors send while a call goes on.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable
from typing import Any

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import ray

from ...protocol import ActorPost
from .mailbox import Mailbox


class Answers(enum.Enum):
    """What a ref in flight answers."""

    START = "start"  # an actor's start(): WorkerReady or WorkerInitFailed
    RUN = "run"  # an actor's run_many(): the outcomes of the mini-batches of one call
    MAIL = "mail"  # the mailbox's take(): what actors posted while a call went on


class RayRefs:
    """Refs in flight -> (what each answers, the worker it concerns; "" for the mailbox)."""

    def __init__(self) -> None:
        self._refs: dict[Any, tuple[Answers, str]] = {}
        self.mailbox: Any = None
        self._take: Any = None  # the take() in flight
        self._taken = 0  # take() replies read

    def open_mailbox(self) -> None:
        """Start the mailbox on the driver's own node (it lives exactly as long as the driver can)."""
        here = ray.get_runtime_context().get_node_id()
        self.mailbox = (
            remote_class(Mailbox)
            .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
            .remote()
        )
        self._take_mail()

    def _take_mail(self) -> None:
        self._take = self.mailbox.take.remote()
        self._refs[self._take] = (Answers.MAIL, "")

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

    def mail(self, ref: Any) -> list[tuple[str, ActorPost]]:
        """The (sender's worker id, message) pairs a done take() of the mailbox brought; waits for the next ones."""
        self._take_mail()
        messages: list[tuple[str, ActorPost]] = ray.get(ref)
        self._taken += 1
        return messages

    def catch_up(self, worker_id: str) -> tuple[list[tuple[str, ActorPost]], int]:
        """Everything posted until now, in order (what the take() in flight took, if it returned, then the rest),
        and the number of the last call `worker_id` noted there as ended (0: none; always for an actor on the
        driver's machine, which notes in a file: `RayActorHandle.died_after`). Before a loss is blamed: an
        actor's last words (which mini-batch it ran, which one ended) may still be on their way when its death
        is known."""
        taken: int
        waiting: list[tuple[str, ActorPost]]
        ended: int
        taken, waiting, ended = ray.get(self.mailbox.sync.remote(worker_id))
        messages = []
        if taken > self._taken:  # the take() in flight returned: its reply is on its way
            ref = self._take
            self._refs.pop(ref, None)
            messages = self.mail(ref)
        return messages + waiting, ended


@functools.cache
def remote_class(cls: type) -> Any:
    """`ray.remote(cls)`, made once per process: Ray exports a class once per job rather than once per pool (the
    export disassembles the class, a tenth of a second of the driver's time here)."""
    return ray.remote(cls)
