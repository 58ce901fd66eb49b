"""The Ray worker pool: one actor per worker, `process_count_per_node` actors pinned to each of `node_count` nodes.

    driver ──submit──▶ RayWorkerPool ──actor.run_many.remote([...])──▶ ParallelStepsWorker actor on Ray node N
       ▲                   │  ray.wait on: every in-flight start ref and call ref, and one mailbox ref;
       └── next_events ◀───┘  timeout = the nearest deadline

Ray owns the transport, node membership and GPU assignment; this module keeps the
contract of the local pool. What the driver submits goes to each actor in as few calls
of several mini-batches as keep it busy (Ray's cost is per call: handle.py).
An actor's death (a crash, a kill after a timeout, its node leaving the cluster) maps
to the one mini-batch it was running when the pool knows which: a call of one, or
one the actor said it runs (watch.py). When it does not (the actor died among
the quick mini-batches of a call), the loss names none: the driver gives them all
back unstarted, and each runs again in a call of its own, where a loss is blamed on
it (`_suspects`). Ray does not report a dead actor's process exit code, so
`Lost.exit_code` is None here (the config refuses `retryable_exit_codes` with the
Ray backend).

Beside the loop: each actor as the pool sees it (handle.py), the refs it waits
on and the mailbox (refs.py), which node serves which node index (nodes.py),
and stopping the actors at the end (shutdown.py).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from pathlib import Path
from typing import Any

from ray.exceptions import ActorUnschedulableError, RayActorError, RayError

import ray

from ...cluster.connect import RayConnection
from ...inputs.minibatch import MiniBatch
from ...protocol import (
    ActorPost,
    Event,
    Finished,
    HangTimeoutChanged,
    InitFailed,
    ItemsLoaded,
    LossReason,
    Lost,
    Outcome,
    Ready,
    WorkerEnded,
    WorkerHangTimeout,
    WorkerInfo,
    WorkerInitFailed,
    WorkerLoaded,
    WorkerOverMemory,
    WorkerReady,
    WorkerRunning,
)
from ...store.logs import stderr_tail
from ...worker.side_inputs import side_inputs_root
from ..base import PoolSettings, WorkerPool, decided_loss
from ..slots import Due, WorkerState, died_in_init_detail, next_wakeup, unattributed_detail
from .actor import ParallelStepsWorker
from .handle import RayActorHandle
from .nodes import RayNodes
from .refs import Answers, RayRefs, remote_class
from .shutdown import remove_side_input_copies, stop_actors


class RayWorkerPool(WorkerPool):
    """`node_count x process_count_per_node` Ray actors, `process_count_per_node` pinned to each Ray node.

    Connects to the Ray this process is already connected to, else `ray_address`, else
    RAY_ADDRESS; with none of them it starts a local Ray for the run and stops it after.
    """

    def __init__(self, settings: PoolSettings, ray_address: str | None, node_wait_s: float):
        super().__init__(settings)
        self._connection = RayConnection(ray_address, len(settings.gpu_ids))
        self._node_wait_s = node_wait_s
        self._handles: dict[str, RayActorHandle] = {}
        self._refs = RayRefs()
        self._events: collections.deque[Event] = collections.deque()
        self._nodes = RayNodes()
        self._side_inputs_root: Path | None = None  # the run's copies on every node (worker/side_inputs.py)
        self._actor_class: Any = None
        self._suspects: set[int] = set()  # mini-batches a loss could not blame: each runs in a call of its own
        self._closed = False

    # Starting ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._connection.open()
        self._nodes.assign(self.settings.node_count, 0.0 if self._connection.started_local else self._node_wait_s)
        self.settings = dataclasses.replace(self.settings, main_node_address=self._nodes[0].address)
        self._refs.open_mailbox()
        self._actor_class = remote_class(ParallelStepsWorker)
        for node in range(self.settings.node_count):
            for slot in range(self.settings.process_count_per_node):
                self._spawn(node, slot)

    def _spawn(self, node_index: int, slot: int) -> None:
        node = self._nodes[node_index]
        info = self._new_worker(node_index, slot)
        gpu = node.take_gpu(self.settings.workers_per_gpu)
        spec = self.settings.make_spec(node_index, info.node_id, info.process_name)
        self._side_inputs_root = side_inputs_root(spec)  # copies of side inputs, models and URL files, per node
        environment = self.settings.worker_environment(node_index, info.process_name, None)
        if gpu:
            del environment["CUDA_VISIBLE_DEVICES"]  # Ray sets it to the GPU it reserved
        here = node.address in self._nodes.here
        handle = self._handles[info.id] = RayActorHandle.start(
            self._actor_class,
            info,
            node,
            1 / self.settings.workers_per_gpu if gpu else 0,
            spec,
            environment,
            self._refs.mailbox,
            self.settings.memory_limit,
            here,
        )
        self._refs.add(handle.start_ref, Answers.START, info.id)

    def replace(self, worker: WorkerInfo) -> None:
        self._check_open()
        if self._nodes[worker.node_index].lost:
            self._nodes.wait_for_spare(worker.node_index, worker.slot)
        else:
            self._spawn(worker.node_index, worker.slot)

    def _observable(self, handle: RayActorHandle) -> bool:
        return handle.node.address in self._nodes.here

    # Feeding and waiting ------------------------------------------------------------------------

    def submit(self, worker: WorkerInfo, mini_batch: MiniBatch, attempt: int, timeout: float | None) -> None:
        handle = self._ready(worker)
        if handle is not None:
            handle.outbox.append((mini_batch, attempt, timeout))  # sent at the next look

    def next_events(self, timeout: float) -> list[Event]:
        end = time.monotonic() + timeout
        while not self._events:
            self._send()
            self._poll(0.0)  # what actors posted before a deadline counts before it
            now = time.monotonic()
            self._enforce_deadlines(now)
            for node_index, slot in self._nodes.rebind(now):
                self._spawn(node_index, slot)
            if self._events:
                break
            times = [self._nodes.next_rebind()]
            for handle in self._handles.values():
                times += handle.slot.wakeups()
            self._poll(max(0.0, min(end, next_wakeup(now, times)) - now))
            if not self._events and time.monotonic() >= end:
                return []
        events = list(self._events)
        self._events.clear()
        return events

    def _send(self) -> None:
        """What was submitted goes to the actors whose calls run low, as few calls as it takes (handle.py)."""
        for handle in self._handles.values():
            for ref in handle.send(self._suspects):
                self._refs.add(ref, Answers.RUN, handle.info.id)

    def _poll(self, timeout: float) -> None:
        """Take every ref that is done; when none is, wait (up to `timeout`) for the first one."""
        for ref in self._refs.ready(timeout):
            entry = self._refs.pop(ref)  # None: taken already with an earlier one of its worker
            if entry is not None:
                self._handle_ready(ref, *entry)

    def _handle_ready(self, ref: Any, answers: Answers, worker_id: str) -> None:
        if answers is Answers.MAIL:
            for sender, message in self._refs.mail(ref):
                self._handle_message(sender, message)
            return
        handle = self._handles.get(worker_id)
        if handle is None:
            return  # a worker already given up (timed out, or lost with its node)
        if answers is Answers.START:
            handle.start_ref = None
            try:
                self._started(handle, ray.get(ref))
            except RayError as exc:
                self._failed(handle, exc)
        elif handle.slot.taking_results:
            self._take_results(handle, ref)

    def _take_results(self, handle: RayActorHandle, ref: Any) -> None:
        """Finish its calls up to `ref`'s."""
        try:
            for done, outcome in handle.results(ref):
                self._refs.drop([done.ref])
                self._finished(handle, done.index, outcome)
        except RayError as exc:
            self._failed(handle, exc)

    def _finished(self, handle: RayActorHandle, index: int, outcome: Outcome) -> None:
        self._suspects.discard(index)
        self._events.append(Finished(handle.info, index, outcome))

    def _started(self, handle: RayActorHandle, reply: WorkerReady | WorkerInitFailed) -> None:
        error = handle.started(reply)
        if error is None:
            self._events.append(Ready(handle.info))
            return
        handle.kill()
        self._forget(handle)
        self._events.append(InitFailed(handle.info, error))

    def _handle_message(self, worker_id: str, message: ActorPost) -> None:
        """A message an actor posted while a call ran; one about an attempt it no longer holds is dropped.
        WorkerRunning, WorkerHangTimeout and WorkerOverMemory say that the attempt they name runs, and so the
        ones before it in its call ended; WorkerEnded brings the outcomes of those and its own."""
        handle = self._handles.get(worker_id)
        if handle is None or not handle.slot.taking_results:
            return
        slot, now = handle.slot, time.monotonic()
        match message:
            case WorkerRunning():
                slot.told_running(message.mini_batch, message.attempt, now - message.elapsed)
            case WorkerEnded():
                for done, outcome in handle.ended(message):
                    self._finished(handle, done.index, outcome)
            case WorkerLoaded() if slot.holds(message.mini_batch, message.attempt):
                self._events.append(ItemsLoaded(handle.info, message.mini_batch, message.items))
            case WorkerHangTimeout() if slot.told_running(message.mini_batch, message.attempt, now):
                self._events.append(HangTimeoutChanged(handle.info, slot.set_hang_timeout(message.seconds, now)))
            case WorkerOverMemory() if slot.told_running(message.mini_batch, message.attempt, now):
                slot.over_memory(message.rss, self.settings.memory_limit or 0)
                self._give_up(handle)

    # Losing workers ---------------------------------------------------------------------------

    def _enforce_deadlines(self, now: float) -> None:
        for handle in list(self._handles.values()):
            due = handle.slot.due(now)
            if due is Due.KILL:
                self._give_up(handle)
            elif due is Due.TIME_OUT:
                handle.time_out(now)

    def _give_up(self, handle: RayActorHandle) -> None:
        """Kill the actor now and report the mini-batch it was running as lost, as its books say."""
        handle.kill()
        self._lose(handle, handle.slot.loss or LossReason.CRASHED, decided_loss(handle.slot, handle.logs))

    def _failed(self, handle: RayActorHandle, exc: RayError) -> None:
        """Ray says the actor is gone (a crash, or its node left), or our actor code failed."""
        if not isinstance(exc, (RayActorError, ActorUnschedulableError)):
            handle.kill()  # our own code raised: the worker is unusable
        if handle.slot.held and not self._catch_up(handle):
            return  # given up meanwhile (over its memory limit), and reported
        cause = _ray_cause(exc)
        if self._nodes.died(handle.node, exc):
            detail = f"node {handle.info.node_id} ({handle.node.address}) left the Ray cluster: {cause}"
            self._lose(handle, LossReason.CRASHED, detail)
        elif handle.slot.state is WorkerState.STARTING:
            self._forget(handle)
            self._events.append(InitFailed(handle.info, died_in_init_detail(cause) + stderr_tail(handle.logs)))
        else:
            detail = decided_loss(handle.slot, handle.logs) or f"worker process died: {cause}{stderr_tail(handle.logs)}"
            self._lose(handle, handle.slot.loss or LossReason.CRASHED, detail)

    def _catch_up(self, handle: RayActorHandle) -> bool:
        """Before the loss of a worker that held mini-batches is blamed: what it posted before it died (which
        mini-batch it ran, which ended) may still be on its way, and it ran the call after the last it noted
        as ended (Ray may lose the reply of a call when its actor dies a moment after). Returns False when a
        message made the pool give it up, and report it, meanwhile."""
        messages, ended = self._refs.catch_up(handle.info.id)
        for sender, message in messages:
            self._handle_message(sender, message)
        if handle.info.id not in self._handles:
            return False
        handle.died_after(ended)
        return True

    def _lose(self, handle: RayActorHandle, reason: LossReason, detail: str) -> None:
        self._forget(handle)
        unknown = handle.slot.unattributed()
        if unknown:
            self._suspects.update(unknown)
            detail += unattributed_detail(len(unknown))
        # The driver gives the mini-batches held behind the one it ran (all of them, when it ran none) to others.
        self._events.append(Lost(handle.info, handle.slot.blame(), reason, None, detail))

    def _forget(self, handle: RayActorHandle) -> None:
        self._handles.pop(handle.info.id, None)
        self._refs.drop(handle.refs())
        if handle.gpu:
            handle.node.give_back_gpu()

    # Closing ----------------------------------------------------------------------------------

    def close(self, grace: float | None = None) -> None:
        """shutdown() on idle workers (bounded by `grace`, default shutdown_timeout), kill the rest,
        drop side-input copies."""
        if self._closed:
            return
        self._closed = True
        try:
            if ray.is_initialized():
                grace = self.settings.shutdown_timeout if grace is None else grace
                stop_actors(list(self._handles.values()), self._refs.mailbox, grace, self.shutdown_cut_off)
                if self._side_inputs_root:
                    remove_side_input_copies(self._nodes.by_index.values(), self._side_inputs_root)
        finally:
            self._handles.clear()
            self._refs.clear()
            self._connection.close()


def _ray_cause(exc: BaseException) -> str:
    """The line of Ray's error that says why the actor ended, without Ray's generic advice."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    cause = lines[-1] if lines else type(exc).__name__
    return cause.split(" Some common causes")[0]
