"""One Ray actor as the Ray pool sees it: its books (`slots.Slot`: the mini-batches it was sent and the
calls that carry them, the deadline of the one it runs, why the pool gives it up) and the calls to it.

Only the pool's loop touches a handle (as `pool/local/process.py`'s `WorkerProcess` on the local side); the actor
itself is `ray_actor.ParallelStepsWorker`. Ray's cost is per call (about half a millisecond of the
driver's time here, against tens of microseconds per mini-batch in a call of a hundred), so what the
driver submits goes out as few calls as keep the actor busy: gathered while a call waits behind the
one that runs, then as calls of up to `CALL_MAX` mini-batches, each returning their outcomes together.
Ray runs an actor's calls in order, one at a time, so the call of the first mini-batch held is the one
running, from the moment the call before it returned (as seen here); which of its mini-batches runs,
the actor says when it matters (pool/ray/watch.py).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from collections.abc import Container, Iterator
from dataclasses import dataclass, field
from typing import Any

from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import ray

from ...inputs.minibatch import MiniBatch
from ...protocol import Outcome, WorkerEnded, WorkerInfo, WorkerInitFailed, WorkerLogPaths, WorkerReady, WorkerSpec
from ...store.logs import note_hang
from ..slots import Held, Slot, WorkerState
from .ends import ends_file, last_ended
from .nodes import RayNode
from .watch import DUMP_DELAY_S

#: The most mini-batches one call carries: a hundred descriptors of ten paths and their outcomes stay under
#: Ray's 100 KB for values passed inline (larger ones go through the object store), and past a hundred the
#: cost per mini-batch no longer falls (docs/performance.md, Ray backend).
CALL_MAX = 128

Attempt = tuple[MiniBatch, int, float | None]  # a mini-batch, its attempt, its run() timeout


@dataclass
class RayActorHandle:
    """One actor, what it holds, and what was submitted to it since the pool last looked."""

    info: WorkerInfo
    actor: Any
    node: RayNode
    logs: WorkerLogPaths
    gpu: bool
    start_ref: Any = None
    slot: Slot = field(default_factory=Slot)
    outbox: list[Attempt] = field(default_factory=list)
    call_size: int = 1  # the next call's most mini-batches: doubles from one up to CALL_MAX
    calls: int = 0  # calls made so far: each call's number
    numbers: dict[Any, int] = field(default_factory=dict)  # the calls whose results are not taken: ref -> number
    ends_path: str | None = None  # where the actor notes each call's end, on the driver's machine (ends.py)

    @classmethod
    def start(
        cls,
        actor_class: Any,
        info: WorkerInfo,
        node: RayNode,
        gpus: float,
        spec: WorkerSpec,
        environment: dict[str, str],
        mailbox: Any,
        memory_limit: int | None,
        here: bool,
    ) -> RayActorHandle:
        """Start the worker's actor on `node` (with that share of one of its GPUs), never restarted by Ray (the
        pool replaces lost workers itself), and call its start(). `here`: the node is on the driver's machine,
        where the actor notes the end of its calls in a file (ends.py)."""
        ends = ends_file(spec.parts_dir, info.node_id, info.process_name) if here else None
        actor = actor_class.options(
            num_cpus=0,
            num_gpus=gpus,
            max_restarts=0,
            max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.ray_id, soft=False),
        ).remote(info.id, spec, environment, gpus > 0, mailbox, ends, memory_limit, os.getcwd())
        return cls(info, actor, node, spec.logs, gpus > 0, start_ref=actor.start.remote(), ends_path=ends)

    def send(self, alone: Container[int]) -> list[Any]:
        """Call the actor with what was submitted, in order, once it holds no call but the one it runs (while
        another waits behind that one, the actor is not about to run dry: what the driver submits meanwhile
        gathers into fewer, larger calls). Returns the calls' refs.

        A call carries up to `call_size` mini-batches, which doubles from one call to the next up to
        `CALL_MAX`: when an actor dies in a call, which mini-batch killed it may not be known (`Slot.unattributed`),
        and a fresh actor's first calls, where that is likeliest, stay small. A mini-batch of `alone` (one such a
        loss could not blame) goes in a call of its own, so that a loss in it is blamed on it."""
        if not self.outbox or self._calls_waiting():
            return []
        queue = collections.deque(self.outbox)
        refs = []
        while queue:
            attempts = [queue.popleft()]
            if attempts[0][0].index not in alone:
                while queue and len(attempts) < self.call_size and queue[0][0].index not in alone:
                    attempts.append(queue.popleft())
            refs.append(self._call(attempts))
            self.call_size = min(CALL_MAX, 2 * self.call_size)
        self.outbox = []
        return refs

    def _calls_waiting(self) -> bool:
        """Whether a call it holds waits behind the one it runs (a look at the first call's mini-batches at most)."""
        head = self.slot.head()
        return head is not None and any(held.ref != head.ref for held in self.slot.held.values())

    def _call(self, attempts: list[Attempt]) -> Any:
        idle = not self.slot.held
        self.calls += 1
        ref = self.actor.run_many.remote(self.calls, attempts)
        self.numbers[ref] = self.calls
        for mini_batch, attempt, timeout in attempts:
            self.slot.hold(mini_batch.index, attempt, timeout, ref)
        if idle:
            self.slot.start_call(ref, time.monotonic())
        return ref

    def started(self, reply: WorkerReady | WorkerInitFailed) -> str | None:
        """Take the reply of the actor's start(). Returns init()'s error, None when the worker is ready."""
        self.info = dataclasses.replace(self.info, pid=reply.pid, gpu=reply.gpu)
        if isinstance(reply, WorkerInitFailed):
            return reply.error
        self.slot.state = WorkerState.READY
        return None

    def results(self, ref: Any) -> Iterator[tuple[Held, Outcome]]:
        """Take the outcomes of its calls, in order, up to `ref`'s: Ray ran the ones before it first, so theirs
        are there too (those the actor told already are not taken twice). Raises RayError when the actor ended
        meanwhile."""
        for call in self.slot.calls_up_to(ref):
            yield from self.slot.finish_call(call, ray.get(call))
            del self.numbers[call]
            following = self.slot.head()
            self.slot.start_call(following.ref if following is not None else None, time.monotonic())

    def ended(self, message: WorkerEnded) -> list[tuple[Held, Outcome]]:
        """A mini-batch it said it ran ended: its outcome and those before it in its call are taken, and the
        rest of the call runs from now."""
        if not self.slot.holds(message.mini_batch, message.attempt):
            return []  # its call's return came first
        call = self.slot.held[message.mini_batch].ref
        done = self.slot.finish_call(call, message.results)
        self.slot.start_call(call, time.monotonic())
        return done

    def died_after(self, ended: int) -> None:
        """The actor died having ended its calls up to number `ended` (as the mailbox says, or its note file:
        their results may never come). It was running the first call after those (none: it died between calls)."""
        if self.ends_path:
            ended = max(ended, last_ended(self.ends_path))
        running = next((ref for ref, number in self.numbers.items() if number > ended), None)
        self.slot.died_in(running)

    def refs(self) -> list[Any]:
        """The refs it is waited on by: its start(), its calls."""
        return [ref for ref in [self.start_ref, *self.numbers] if ref is not None]

    def time_out(self, now: float) -> None:
        """The one it runs (or its call) passed its deadline: its results are no longer taken, and the actor is
        killed once its own watchdog has written its stacks (`DUMP_DELAY_S` after the deadline)."""
        note_hang(self.logs, self.slot.time_out(now, dump_delay=DUMP_DELAY_S))

    def kill(self) -> None:
        try:
            ray.kill(self.actor, no_restart=True)
        except (RayError, ValueError):
            pass
