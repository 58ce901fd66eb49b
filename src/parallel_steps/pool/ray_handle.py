"""One Ray actor as the Ray pool sees it: its books (`slots.Slot`: the mini-batches it was sent and the
refs of their results, the deadline of the one it runs, why the pool gives it up) and the calls to it.

Only the pool's loop touches a handle (as `local_process.WorkerProcess` on the local side); the actor
itself is `ray_actor.ParallelStepsWorker`. Ray runs an actor's calls in order, one at a time, so the
first mini-batch held is the one running, from the moment the one before it finished (as seen here).
"""

from __future__ import annotations

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
from ..protocol import Outcome, WorkerInfo, WorkerInitFailed, WorkerLogPaths, WorkerReady, WorkerSpec
from ..store.logs import note_hang
from .ray_actor import DUMP_DELAY_S
from .ray_nodes import RayNode
from .slots import Held, Slot, WorkerState


@dataclass
class RayActorHandle:
    """One actor and what it holds."""

    info: WorkerInfo
    actor: Any
    node: RayNode
    logs: WorkerLogPaths
    gpu: bool
    start_ref: Any = None
    slot: Slot = field(default_factory=Slot)

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
        self.slot.hold(mini_batch.index, attempt, timeout, ref)
        if len(self.slot.held) == 1:
            self.slot.start(mini_batch.index, time.monotonic())
        return ref

    def started(self, reply: WorkerReady | WorkerInitFailed) -> str | None:
        """Take the reply of the actor's start(). Returns init()'s error, None when the worker is ready."""
        self.info = dataclasses.replace(self.info, pid=reply.pid, gpu=reply.gpu)
        if isinstance(reply, WorkerInitFailed):
            return reply.error
        self.slot.state = WorkerState.READY
        return None

    def results(self, ref: Any) -> Iterator[tuple[Held, Outcome]]:
        """Take the results of what it holds, in order, up to `ref`'s: Ray ran the ones before it first,
        so their results are there too. Raises RayError when the actor ended meanwhile."""
        while (head := self.slot.head()) is not None:
            outcome: Outcome = ray.get(head.ref)
            self.slot.finish(head.index)
            following = self.slot.head()
            if following is not None:
                self.slot.start(following.index, time.monotonic())
            yield head, outcome
            if head.ref == ref:
                return

    def refs(self) -> list[Any]:
        return [r for r in [self.start_ref, *(held.ref for held in self.slot.held.values())] if r is not None]

    def time_out(self, now: float) -> None:
        """The one it runs passed its deadline: its results are no longer taken, and the actor is killed
        once its own watchdog has written its stacks (`DUMP_DELAY_S` after the deadline)."""
        note_hang(self.logs, self.slot.time_out(now, dump_delay=DUMP_DELAY_S))

    def kill(self) -> None:
        try:
            ray.kill(self.actor, no_restart=True)
        except (RayError, ValueError):
            pass
