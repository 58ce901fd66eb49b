"""The Ray worker pool: one actor per worker, `process_count_per_node` actors pinned to each of `node_count` nodes.

    driver ──submit──▶ RayWorkerPool ──actor.run.remote()──▶ ParallelStepsWorker actor on Ray node N
       ▲                   │  ray.wait on: every in-flight start/run ref and one mailbox ref;
       └── next_events ◀───┘  timeout = the nearest deadline

Ray owns the transport, node membership and GPU assignment; this module keeps the
contract of the local pool: an actor's death (a crash, a kill after a timeout,
its node leaving the cluster) maps to exactly the one mini-batch it was running.
Ray does not report a dead actor's process exit code, so `Lost.exit_code` is None
here (the config refuses `retryable_exit_codes` with the Ray backend).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray.exceptions import ActorUnschedulableError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import ray

from ..inputs.minibatch import MiniBatch
from ..protocol import Event, Finished, HangTimeoutChanged, InitFailed, ItemsLoaded, LossReason, Lost, Ready, WorkerInfo
from ..store.logs import WorkerLogPaths, hang_summary, note_error, note_hang, stderr_tail
from ..worker.runtime import side_inputs_root
from .base import (
    PoolSettings,
    WorkerPool,
    WorkerState,
    next_wakeup,
    out_of_memory_detail,
    shutdown_cut_off_detail,
    timed_out_detail,
)
from .ray_actor import Mailbox, ParallelStepsWorker, remove_side_inputs
from .ray_connect import RayConnection
from .ray_nodes import RayNode, RayNodes

_DUMP_GRACE_S = 2.0  # a timed-out actor dumps its stacks, then is killed this long after its deadline
_STOP_WAIT_S = 10.0


@dataclass
class _Queued:
    """A mini-batch given to an actor; Ray runs an actor's calls in order, one at a time."""

    mini_batch: MiniBatch
    attempt: int
    timeout: float | None
    ref: Any


@dataclass
class _Actor:
    """One actor and what it holds (only the pool's loop touches it)."""

    info: WorkerInfo
    actor: Any
    node: RayNode
    logs: WorkerLogPaths
    gpu: bool
    state: WorkerState = WorkerState.STARTING
    start_ref: Any = None
    queue: collections.deque[_Queued] = field(default_factory=collections.deque)  # the head is running
    deadline: float | None = None  # of the head of the queue
    kill_at: float | None = None
    loss: LossReason | None = None
    loss_detail: str = ""

    def start_head(self, now: float) -> None:
        """The head started when the one before it finished (as seen here); its timeout counts from then."""
        timeout = self.queue[0].timeout if self.queue else None
        self.deadline = now + timeout if timeout else None

    def refs(self) -> list[Any]:
        return [r for r in [self.start_ref, *(q.ref for q in self.queue)] if r is not None]


class RayWorkerPool(WorkerPool):
    """`node_count x process_count_per_node` Ray actors, `process_count_per_node` pinned to each Ray node.

    Connects to the Ray this process is already connected to, else `ray_address`, else
    RAY_ADDRESS; with none of them it starts a local Ray for the run and stops it after.
    """

    def __init__(self, settings: PoolSettings, ray_address: str | None, node_wait_s: float):
        super().__init__(settings)
        self._connection = RayConnection(ray_address, len(settings.gpu_ids))
        self._node_wait_s = node_wait_s
        self._handles: dict[str, _Actor] = {}
        self._refs: dict[Any, tuple[str, str]] = {}  # ObjectRef -> (kind, worker id)
        self._events: collections.deque[Event] = collections.deque()
        self._nodes = RayNodes()
        self._mailbox: Any = None
        self._side_inputs_root: Path | None = None  # where nodes copied this run's side inputs
        self._actor_class: Any = None
        self._closed = False

    # Starting ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._connection.open()
        self._nodes.assign(self.settings.node_count, 0.0 if self._connection.started_local else self._node_wait_s)
        self.settings = dataclasses.replace(self.settings, main_node_address=self._nodes[0].address)
        # The mailbox lives on the driver's own node: exactly as long as the driver can.
        here = ray.get_runtime_context().get_node_id()
        self._mailbox = (
            ray.remote(Mailbox)
            .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
            .remote()
        )
        self._take_mail()
        self._actor_class = ray.remote(ParallelStepsWorker)
        for node in range(self.settings.node_count):
            for slot in range(self.settings.process_count_per_node):
                self._spawn(node, slot)

    def _take_mail(self) -> None:
        self._refs[self._mailbox.take.remote()] = ("mail", "")

    def _spawn(self, node_index: int, slot: int) -> None:
        node = self._nodes[node_index]
        info = self._new_worker(node_index, slot)
        gpu = node.gpus_free > 0
        node.gpus_free -= gpu
        spec = self.settings.make_spec(node_index, info.node_id, info.process_name)
        if spec.side_inputs:
            self._side_inputs_root = side_inputs_root(spec)
        environment = self.settings.worker_environment(node_index, info.process_name, None)
        if gpu:
            del environment["CUDA_VISIBLE_DEVICES"]  # Ray sets it to the GPU it reserved
        actor = self._actor_class.options(
            num_cpus=0,
            num_gpus=1 if gpu else 0,
            max_restarts=0,
            max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.ray_id, soft=False),
        ).remote(info.id, spec, environment, gpu, self._mailbox, self.settings.memory_limit, os.getcwd())
        handle = self._handles[info.id] = _Actor(info, actor, node, spec.logs, gpu)
        handle.start_ref = actor.start.remote()
        self._refs[handle.start_ref] = ("start", info.id)

    def replace(self, worker: WorkerInfo) -> None:
        self._check_open()
        if self._nodes[worker.node_index].lost:
            self._nodes.wait_for_spare(worker.node_index, worker.slot)
        else:
            self._spawn(worker.node_index, worker.slot)

    def _observable(self, handle: _Actor) -> bool:
        return handle.node.address in self._nodes.here

    # Feeding and waiting ------------------------------------------------------------------------

    def submit(self, worker: WorkerInfo, mini_batch: MiniBatch, attempt: int, timeout: float | None) -> None:
        handle = self._ready(worker)
        if handle is None:
            return
        ref = handle.actor.run.remote(mini_batch, attempt, timeout)
        self._refs[ref] = ("run", worker.id)
        handle.queue.append(_Queued(mini_batch, attempt, timeout, ref))
        if len(handle.queue) == 1:
            handle.start_head(time.monotonic())

    def next_events(self, timeout: float) -> list[Event]:
        end = time.monotonic() + timeout
        while not self._events:
            now = time.monotonic()
            self._enforce_deadlines(now)
            for node_index, slot in self._nodes.rebind(now):
                self._spawn(node_index, slot)
            if self._events:
                break
            times = [self._nodes.next_rebind()]
            for handle in self._handles.values():
                times += [handle.deadline, handle.kill_at]
            self._poll(max(0.0, min(end, next_wakeup(now, times)) - now))
            if not self._events and time.monotonic() >= end:
                return []
        events = list(self._events)
        self._events.clear()
        return events

    def _poll(self, timeout: float) -> None:
        """Take every ref that is done; when none is, wait (up to `timeout`) for the first one."""
        refs = list(self._refs)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if not ready and timeout > 0:
            ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        ready.sort(key=lambda ref: self._refs[ref][0] != "mail")  # messages first: they may explain a death
        for ref in ready:
            if ref in self._refs:  # not taken already with an earlier one of its worker
                self._handle_ready(ref)

    def _handle_ready(self, ref: Any) -> None:
        kind, worker_id = self._refs.pop(ref)
        if kind == "mail":
            self._take_mail()
            for sender, message in ray.get(ref):
                self._handle_message(sender, message)
            return
        handle = self._handles.get(worker_id)
        if handle is None:
            return  # a worker already given up (timed out, or lost with its node)
        if kind == "start":
            handle.start_ref = None
            try:
                self._started(handle, ray.get(ref))
            except RayError as exc:
                self._failed(handle, exc)
        elif handle.state is WorkerState.READY:
            self._take_results(handle, ref)

    def _take_results(self, handle: _Actor, ref: Any) -> None:
        """Finish the queue up to `ref`: Ray ran the ones before it first, so their results are there too."""
        while handle.queue:
            head = handle.queue[0]
            self._refs.pop(head.ref, None)
            try:
                outcome = ray.get(head.ref)
            except RayError as exc:
                self._failed(handle, exc)
                return
            handle.queue.popleft()
            handle.start_head(time.monotonic())
            self._events.append(Finished(handle.info, head.mini_batch.index, outcome))
            if head.ref == ref:
                return

    def _started(self, handle: _Actor, value: tuple[Any, ...]) -> None:
        """("ready", pid, gpu) or ("init_failed", error, pid, gpu) from the actor's start()."""
        pid, gpu = value[-2:]
        handle.info = dataclasses.replace(handle.info, pid=pid, gpu=gpu)
        if value[0] == "ready":
            handle.state = WorkerState.READY
            self._events.append(Ready(handle.info))
            return
        self._kill(handle)
        self._forget(handle)
        self._events.append(InitFailed(handle.info, value[1]))

    def _handle_message(self, worker_id: str, message: tuple[Any, ...]) -> None:
        kind, index, attempt, value = message
        handle = self._handles.get(worker_id)
        if handle is None or handle.state is not WorkerState.READY:
            return
        position = next(
            (i for i, q in enumerate(handle.queue) if (q.mini_batch.index, q.attempt) == (index, attempt)), None
        )
        if position is None:
            return  # about an attempt that already ended
        if position:  # the actor runs this one, so the ones before it are done: take them first
            self._take_results(handle, handle.queue[position - 1].ref)
            if handle.info.id not in self._handles:
                return
        if kind == "loaded":
            self._events.append(ItemsLoaded(handle.info, index, value))
        elif kind == "hang_timeout":
            seconds = handle.queue[0].timeout if value is not None and value < 0 else value
            handle.deadline = time.monotonic() + seconds if seconds else None
            self._events.append(HangTimeoutChanged(handle.info, seconds))
        elif kind == "out_of_memory":
            detail = out_of_memory_detail(value, self.settings.memory_limit or 0)
            self._give_up(handle, LossReason.OUT_OF_MEMORY, detail)

    # Losing workers ---------------------------------------------------------------------------

    def _enforce_deadlines(self, now: float) -> None:
        for handle in list(self._handles.values()):
            if handle.kill_at is not None and now >= handle.kill_at:
                summary = hang_summary(handle.logs.error) if handle.loss is LossReason.TIMED_OUT else ""
                self._give_up(handle, handle.loss or LossReason.CRASHED, handle.loss_detail + summary)
            elif handle.state is WorkerState.READY and handle.deadline is not None and now >= handle.deadline:
                head = handle.queue[0]
                detail = timed_out_detail(head.timeout or 0.0, head.mini_batch.index)
                note_hang(handle.logs, detail)
                handle.state, handle.deadline = WorkerState.STOPPING, None  # results that still come are not taken
                handle.loss, handle.loss_detail = LossReason.TIMED_OUT, detail
                handle.kill_at = now + _DUMP_GRACE_S  # the actor's own watchdog writes its stacks meanwhile

    def _give_up(self, handle: _Actor, reason: LossReason, detail: str) -> None:
        """Kill the actor now and report the mini-batch it was running as lost for `reason`."""
        self._kill(handle)
        self._lose(handle, reason, detail)

    def _failed(self, handle: _Actor, exc: RayError) -> None:
        """Ray says the actor is gone (a crash, or its node left), or our actor code failed."""
        if not isinstance(exc, (RayActorError, ActorUnschedulableError)):
            self._kill(handle)  # our own code raised: the worker is unusable
        cause = _ray_cause(exc)
        if self._nodes.died(handle.node, exc):
            detail = f"node {handle.info.node_id} ({handle.node.address}) left the Ray cluster: {cause}"
            self._lose(handle, LossReason.CRASHED, detail)
        elif handle.state is WorkerState.STARTING:
            self._forget(handle)
            error = f"worker died during init(): {cause}{stderr_tail(handle.logs)}"
            self._events.append(InitFailed(handle.info, error))
        else:
            detail = handle.loss_detail or f"worker process died: {cause}{stderr_tail(handle.logs)}"
            self._lose(handle, handle.loss or LossReason.CRASHED, detail)

    def _lose(self, handle: _Actor, reason: LossReason, detail: str) -> None:
        self._forget(handle)
        head = handle.queue.popleft() if handle.queue else None
        # The driver gives the mini-batches queued behind the head to other workers.
        self._events.append(Lost(handle.info, head.mini_batch.index if head else None, reason, None, detail))

    def _forget(self, handle: _Actor) -> None:
        self._handles.pop(handle.info.id, None)
        for ref in handle.refs():
            self._refs.pop(ref, None)
        if handle.gpu and not handle.node.lost:
            handle.node.gpus_free += 1  # Ray hands the freed GPU to the replacement

    def _kill(self, handle: _Actor) -> None:
        try:
            ray.kill(handle.actor, no_restart=True)
        except (RayError, ValueError):
            pass

    # Closing ----------------------------------------------------------------------------------

    def close(self, grace: float | None = None) -> None:
        """shutdown() on idle workers (bounded by `grace`, default shutdown_timeout), kill the rest,
        drop side-input copies."""
        if self._closed:
            return
        self._closed = True
        try:
            if ray.is_initialized():
                self._stop_workers(self.settings.shutdown_timeout if grace is None else grace)
                self._clean_nodes()
        finally:
            self._handles.clear()
            self._refs.clear()
            self._connection.close()

    def _stop_workers(self, grace: float) -> None:
        handles = list(self._handles.values())
        idle = [h for h in handles if h.state is WorkerState.READY and not h.queue] if grace > 0 else []
        stopping = {handle.actor.shutdown.remote(grace): handle for handle in idle}
        if stopping:
            _, pending = ray.wait(list(stopping), num_returns=len(stopping), timeout=grace + _DUMP_GRACE_S)
            for ref in pending:
                self.shutdown_cut_off.append(stopping[ref].info.id)
                note_error(stopping[ref].logs, f"{shutdown_cut_off_detail(grace)} (its stacks are above)")
        for handle in handles:
            self._kill(handle)
        if self._mailbox is not None:
            ray.kill(self._mailbox)
        # Wait (bounded) until Ray has really ended them, so no worker outlives the run.
        gone = [handle.actor.__ray_ready__.remote() for handle in handles]
        ray.wait(gone, num_returns=len(gone), timeout=_STOP_WAIT_S)

    def _clean_nodes(self) -> None:
        """Remove this run's side-input copies from every node that got some."""
        if not self._side_inputs_root:
            return
        remove = ray.remote(remove_side_inputs)
        nodes = [node for node in self._nodes.by_index.values() if not node.lost]
        refs = [
            remove.options(
                num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node.ray_id, soft=False)
            ).remote(self._side_inputs_root)
            for node in nodes
        ]
        ray.wait(refs, num_returns=len(refs), timeout=_STOP_WAIT_S)


def _ray_cause(exc: BaseException) -> str:
    """The line of Ray's error that says why the actor ended, without Ray's generic advice."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    cause = lines[-1] if lines else type(exc).__name__
    return cause.split(" Some common causes")[0]
