"""One Ray actor as the Ray pool sees it: the mini-batches it was sent, the deadline of the one it runs,
and why the pool is giving it up.

Only the pool's loop touches a handle (as `local_process.WorkerProcess` on the local side); the actor
itself is `ray_actor.ParallelStepsWorker`. Ray runs an actor's calls in order, one at a time, so the
head of the queue is the one running.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import ray

from ..inputs.minibatch import MiniBatch
from ..protocol import LossReason, Outcome, WorkerInfo, WorkerSpec
from ..store.logs import WorkerLogPaths, note_hang
from .base import WorkerState, timed_out_detail
from .ray_nodes import RayNode

DUMP_GRACE_S = 2.0  # a timed-out actor dumps its stacks, then is killed this long after its deadline


@dataclass
class Queued:
    """A mini-batch sent to an actor, and the ref of its result."""

    mini_batch: MiniBatch
    attempt: int
    timeout: float | None
    ref: Any


@dataclass
class RayActorHandle:
    """One actor and what it holds."""

    info: WorkerInfo
    actor: Any
    node: RayNode
    logs: WorkerLogPaths
    gpu: bool
    state: WorkerState = WorkerState.STARTING
    start_ref: Any = None
    queue: collections.deque[Queued] = field(default_factory=collections.deque)  # the head is running
    deadline: float | None = None  # of the head of the queue
    kill_at: float | None = None
    loss: LossReason | None = None
    loss_detail: str = ""

    @classmethod
    def start(
        cls,
        actor_class: Any,
        info: WorkerInfo,
        node: RayNode,
        gpu: bool,
        spec: WorkerSpec,
        environment: dict[str, str],
        mailbox: Any,
        memory_limit: int | None,
    ) -> RayActorHandle:
        """Start the worker's actor on `node` (with a GPU of it when `gpu`), never restarted by Ray (the
        pool replaces lost workers itself), and call its start()."""
        actor = actor_class.options(
            num_cpus=0,
            num_gpus=1 if gpu else 0,
            max_restarts=0,
            max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.ray_id, soft=False),
        ).remote(info.id, spec, environment, gpu, mailbox, memory_limit, os.getcwd())
        return cls(info, actor, node, spec.logs, gpu, start_ref=actor.start.remote())

    def send(self, mini_batch: MiniBatch, attempt: int, timeout: float | None) -> Any:
        """Queue one mini-batch on the actor; returns the ref of its result."""
        ref = self.actor.run.remote(mini_batch, attempt, timeout)
        self.queue.append(Queued(mini_batch, attempt, timeout, ref))
        if len(self.queue) == 1:
            self.start_head(time.monotonic())
        return ref

    def start_head(self, now: float) -> None:
        """The head started when the one before it finished (as seen here); its timeout counts from then."""
        timeout = self.queue[0].timeout if self.queue else None
        self.deadline = now + timeout if timeout else None

    def started(self, reply: tuple[Any, ...]) -> str | None:
        """Take the reply of the actor's start(): ("ready", pid, gpu) or ("init_failed", error, pid, gpu).
        Returns init()'s error, None when the worker is ready."""
        pid, gpu = reply[-2:]
        self.info = dataclasses.replace(self.info, pid=pid, gpu=gpu)
        if reply[0] == "ready":
            self.state = WorkerState.READY
            return None
        error: str = reply[1]
        return error

    def results(self, ref: Any) -> Iterator[tuple[Queued, Outcome]]:
        """Take the queue's results up to `ref`'s, in order: Ray ran the ones before it first, so their
        results are there too. Raises RayError when the actor ended meanwhile."""
        while self.queue:
            head = self.queue[0]
            outcome: Outcome = ray.get(head.ref)
            self.queue.popleft()
            self.start_head(time.monotonic())
            yield head, outcome
            if head.ref == ref:
                return

    def set_hang_timeout(self, seconds: float | None) -> float | None:
        """The entry script set a new limit for the running mini-batch (negative: its run() timeout
        again), counting from now; returns the limit in force."""
        seconds = self.queue[0].timeout if seconds is not None and seconds < 0 else seconds
        self.deadline = time.monotonic() + seconds if seconds else None
        return seconds

    def position(self, index: int, attempt: int) -> int | None:
        """Where that attempt is in the queue; None once it ended."""
        return next((i for i, q in enumerate(self.queue) if (q.mini_batch.index, q.attempt) == (index, attempt)), None)

    def refs(self) -> list[Any]:
        return [r for r in [self.start_ref, *(q.ref for q in self.queue)] if r is not None]

    def time_out(self, now: float) -> None:
        """The head ran past its deadline: its results are no longer taken, and the actor is killed at
        `kill_at`, once its own watchdog has written its stacks."""
        head = self.queue[0]
        detail = timed_out_detail(head.timeout or 0.0, head.mini_batch.index)
        note_hang(self.logs, detail)
        self.state, self.deadline = WorkerState.STOPPING, None
        self.loss, self.loss_detail = LossReason.TIMED_OUT, detail
        self.kill_at = now + DUMP_GRACE_S

    def kill(self) -> None:
        try:
            ray.kill(self.actor, no_restart=True)
        except (RayError, ValueError):
            pass
