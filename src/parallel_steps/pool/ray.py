"""The Ray worker pool: one actor per worker, `process_count_per_node` actors pinned to each of `node_count` nodes.

    driver ──submit──▶ RayWorkerPool ──actor.run.remote()──▶ ParallelStepsWorker actor on Ray node N
       ▲                   │  ray.wait on: every in-flight start/run ref and one mailbox ref;
       └── next_events ◀───┘  timeout = the nearest deadline

Ray owns the transport, node membership and GPU assignment; this module keeps the
contract of the local pool: one mini-batch per worker, so an actor's death (a
crash, a kill after a timeout, its node leaving the cluster) maps to exactly the
one mini-batch it held. Messages a worker sends while run() is still going
(items loaded, a changed hang timeout, memory above the limit) go through one
small mailbox actor, so the loop waits on a single extra ref. Workers write
their logs and output parts straight into the run directory, which must be on a
filesystem every node mounts at the same path.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import faulthandler
import logging
import os
import re
import shutil
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray.exceptions import ActorUnschedulableError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import ray

from ..errors import ConfigError
from ..inputs.minibatch import MiniBatch
from ..store.logs import WorkerLogPaths, hang_summary, stderr_tail
from ..worker.runtime import InitError, WorkerRuntime, WorkerSpec, localize_side_inputs, side_inputs_root
from .base import (
    Event,
    Finished,
    HangTimeoutChanged,
    InitFailed,
    ItemsLoaded,
    Lost,
    PoolSettings,
    Ready,
    WorkerInfo,
    WorkerPool,
    node_id_of,
    tree_rss,
)
from .ray_env import NODE_INDEX_LABEL

_DUMP_GRACE_S = 2.0  # a timed-out actor dumps its stacks, then is killed this long after its deadline
_DUMP_DELAY_S = 0.5  # the actor's own stack dump fires this long after its deadline (after the header)
_NODE_POLL_S = 1.0
_CONNECT_S = 10.0  # how long a cluster address may refuse connections before the run gives up
_REBIND_EVERY_S = 2.0  # how often slots of a lost node look for a node that joined since
_MEMORY_CHECK_S = 1.0
_STOP_WAIT_S = 10.0

log = logging.getLogger(__name__)


# The actor side ---------------------------------------------------------------------------------


class ParallelStepsWorker:
    """One worker inside a Ray actor: sets up the worker environment and log files, then drives a WorkerRuntime.

    Runs in the actor's main thread, like a local worker process, so entry scripts that
    install signal handlers keep working. Failures come back as traceback text.
    """

    def __init__(
        self,
        worker_id: str,
        spec: WorkerSpec,
        environment: dict[str, str],
        gpu: bool,
        mailbox: Any,
        memory_limit: int | None,
        cwd: str,
    ):
        self._id, self._spec, self._environment, self._gpu = worker_id, spec, environment, gpu
        self._mailbox, self._memory_limit, self._cwd = mailbox, memory_limit, cwd
        self._runtime: WorkerRuntime | None = None
        self._current: tuple[int, int] | None = None
        self._timeout: float | None = None
        self._dump_file = None

    def start(self) -> tuple[Any, ...]:
        """Environment, log redirection, side-input copies, then the script's init(): ("ready", pid, gpu) or
        ("init_failed", traceback, pid, gpu)."""
        os.environ.update(self._environment)
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "") if self._gpu else None
        problem = _shared_run_dir_problem(self._spec)
        if problem:
            return ("init_failed", problem, os.getpid(), gpu)
        _redirect_output(self._spec.logs)
        if os.path.isdir(self._cwd):
            os.chdir(self._cwd)
        try:
            spec = localize_side_inputs(self._spec, copy_paths=True)  # nodes may not share a filesystem
        except Exception as exc:
            return (
                "init_failed",
                f"side inputs could not be copied to this node: {type(exc).__name__}: {exc}",
                os.getpid(),
                gpu,
            )
        self._dump_file = open(spec.logs.error, "a", encoding="utf-8")
        self._runtime = WorkerRuntime(spec, hang_timeout_hook=self._on_hang_timeout)
        try:
            self._runtime.start()
        except InitError as exc:
            return ("init_failed", str(exc), os.getpid(), gpu)
        finally:
            _flush()
        if self._memory_limit:
            threading.Thread(target=self._watch_memory, daemon=True, name="parallel-steps-memory").start()
        return ("ready", os.getpid(), gpu)

    def run(self, mini_batch: MiniBatch, attempt: int, timeout: float | None):
        """One attempt; a faulthandler watchdog writes the stacks if it outlives its deadline."""
        self._current, self._timeout = (mini_batch.index, attempt), timeout
        self._arm_dump(timeout)
        try:
            return self._runtime.run(mini_batch, attempt, on_loaded=lambda n: self._post("loaded", n))
        finally:
            faulthandler.cancel_dump_traceback_later()
            self._current = None
            self._runtime.flush()

    def shutdown(self, timeout: float) -> None:
        """The script's shutdown(); its stacks are dumped if it takes longer than `timeout`."""
        self._arm_dump(timeout)
        try:
            if self._runtime is not None:
                self._runtime.shutdown()
        finally:
            faulthandler.cancel_dump_traceback_later()
            _flush()

    def _arm_dump(self, seconds: float | None) -> None:
        faulthandler.cancel_dump_traceback_later()
        if seconds and self._dump_file is not None:
            faulthandler.dump_traceback_later(seconds + _DUMP_DELAY_S, file=self._dump_file)

    def _on_hang_timeout(self, seconds: float | None) -> None:
        self._arm_dump(self._timeout if seconds is not None and seconds < 0 else seconds)
        self._post("hang_timeout", seconds)

    def _post(self, kind: str, value: Any) -> None:
        if self._current is not None:
            self._mailbox.post.remote(self._id, (kind, *self._current, value))

    def _watch_memory(self) -> None:
        """Tell the pool once run() goes above worker_memory_limit; the pool kills the actor."""
        told = None
        while True:
            time.sleep(_MEMORY_CHECK_S)
            rss = tree_rss(os.getpid())
            current = self._current
            if current is not None and current != told and rss > self._memory_limit:
                self._post("out_of_memory", rss)
                told = current


class _Mailbox:
    """Messages workers send during run(); the pool keeps one `take()` in flight and wakes when it returns."""

    def __init__(self):
        self._messages: list[tuple[str, tuple[Any, ...]]] = []
        self._posted = asyncio.Event()

    async def post(self, worker_id: str, message: tuple[Any, ...]) -> None:
        self._messages.append((worker_id, message))
        self._posted.set()

    async def take(self) -> list[tuple[str, tuple[Any, ...]]]:
        await self._posted.wait()
        self._posted.clear()
        messages, self._messages = self._messages, []
        return messages


def _shared_run_dir_problem(spec: WorkerSpec) -> str | None:
    if os.path.isdir(spec.parts_dir):
        return None
    return (
        f"the run directory {Path(spec.parts_dir).parent} is not visible on this node "
        f"({ray.util.get_node_ip_address()}): put run_root on a filesystem every node mounts at the same "
        f"path (see docs/multinode.md)"
    )


def _redirect_output(logs: WorkerLogPaths) -> None:
    """Point fds 1 and 2 at the worker's log files, so the script's subprocesses write there too."""
    _flush()
    for fd, path in ((1, logs.stdout), (2, logs.stderr)):
        path.parent.mkdir(parents=True, exist_ok=True)
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(target, fd)
        os.close(target)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


# Side inputs --------------------------------------------------------------------------------------


def _remove_side_inputs(folder: Path) -> None:
    """Runs on each node when the run ends: its copies, locks and any partial copy go."""
    shutil.rmtree(folder, ignore_errors=True)


# The driver side ----------------------------------------------------------------------------------


@dataclass
class _Node:
    """A Ray node serving one node index; `lost` once it left the cluster."""

    index: int
    ray_id: str
    address: str
    gpus_free: int
    lost: bool = False


@dataclass
class _Queued:
    """A mini-batch given to an actor; Ray runs an actor's calls in order, one at a time."""

    mini_batch: MiniBatch
    attempt: int
    timeout: float | None
    ref: Any


@dataclass
class _Handle:
    """One actor and what it holds (only the pool's loop touches it)."""

    info: WorkerInfo
    actor: Any
    node: _Node
    logs: WorkerLogPaths
    gpu: bool
    state: str = "starting"  # starting | ready | killing
    start_ref: Any = None
    queue: collections.deque = field(default_factory=collections.deque)  # of _Queued; the head is running
    deadline: float | None = None  # of the head of the queue
    kill_at: float | None = None
    kill_reason: str | None = None
    kill_detail: str = ""

    def start_head(self, now: float) -> None:
        """The head started when the one before it finished (as seen here); its timeout counts from then."""
        timeout = self.queue[0].timeout if self.queue else None
        self.deadline = now + timeout if timeout else None

    def refs(self) -> list[Any]:
        return [r for r in [self.start_ref, *(q.ref for q in self.queue)] if r is not None]


class RayWorkerPool(WorkerPool):
    """`node_count x process_count_per_node` Ray actors, `process_count_per_node` pinned to each Ray node.

    Connects to the Ray this process is already connected to, else `config.ray_address`, else
    RAY_ADDRESS; with none of them it starts a local Ray for the run and stops it after.
    """

    def __init__(self, settings: PoolSettings, config: Any):
        super().__init__(settings)
        self.config = config
        self._handles: dict[str, _Handle] = {}
        self._refs: dict[Any, tuple[str, str]] = {}  # ObjectRef -> (kind, worker id)
        self._events: collections.deque[Event] = collections.deque()
        self._next_process: dict[int, int] = collections.defaultdict(int)
        self._nodes: dict[int, _Node] = {}
        self._waiting: list[tuple[int, int]] = []  # (node index, slot) of lost nodes
        self._next_rebind = 0.0
        self._mailbox = None
        self._owns_ray = False
        self._started_local = False
        self._side_inputs_root: Path | None = None  # where nodes copied this run's side inputs
        self._saved_auth_mode: str | None = None
        self._actor_class = None
        self._here: set[str] = set()  # addresses of this machine's Ray nodes (resource monitor)
        self._closed = False

    # Starting ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._connect()
        self._assign_nodes()
        self._start_mailbox()
        self._actor_class = ray.remote(ParallelStepsWorker)
        for node in range(self.settings.node_count):
            for slot in range(self.settings.process_count_per_node):
                self._spawn(node, slot)

    def _connect(self) -> None:
        if ray.is_initialized():
            return
        address = self.config.ray_address or os.environ.get("RAY_ADDRESS")
        quiet = dict(logging_level=logging.WARNING, log_to_driver=False)
        self._saved_auth_mode = os.environ.get("RAY_AUTH_MODE")
        if address:
            _check_reachable(address)
            try:
                ray.init(address=address, **quiet)
            except Exception as exc:
                lines = [line for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
                raise ConfigError(
                    "ray_address",
                    f"cannot connect to the Ray cluster at {address}: {lines[-1]}",
                    "check the address; a token-protected cluster also needs RAY_AUTH_MODE=token and RAY_AUTH_TOKEN",
                ) from None
        else:
            # "local" never attaches to a cluster someone else started on this machine.
            ray.init(address="local", num_gpus=len(self.settings.gpu_ids), include_dashboard=False, **quiet)
        self._owns_ray = True
        self._started_local = not address

    def _assign_nodes(self) -> None:
        """Pick node_count Ray nodes (bounded wait), labelled nodes by their index first, then the driver's."""
        wanted = self.settings.node_count
        bound = 0.0 if self._started_local else self.config.first_task_creation_timeout
        deadline = time.monotonic() + bound
        while len(nodes := _eligible_nodes()) < wanted:
            if time.monotonic() >= deadline:
                waited = f" after waiting {bound:g} s" if bound else ""
                raise ConfigError(
                    "node_count",
                    f"{wanted} nodes asked for, but the Ray cluster has {len(nodes)} alive "
                    f"node(s) that can take workers{waited}",
                    "start more nodes, or lower node_count",
                )
            time.sleep(_NODE_POLL_S)
        for index, node in enumerate(nodes[:wanted]):
            self._nodes[index] = _Node(index, node["NodeID"], node["NodeManagerAddress"], _gpu_count(node))
        self.settings = dataclasses.replace(self.settings, main_node_address=self._nodes[0].address)
        self._here = {ray.util.get_node_ip_address()}

    def _start_mailbox(self) -> None:
        # On the driver's own node: it lives exactly as long as the driver can (soft affinity would spread it).
        here = ray.get_runtime_context().get_node_id()
        self._mailbox = (
            ray.remote(_Mailbox)
            .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
            .remote()
        )
        self._take_mail()

    def _take_mail(self) -> None:
        self._refs[self._mailbox.take.remote()] = ("mail", "")

    def _spawn(self, node_index: int, slot: int) -> None:
        node = self._nodes[node_index]
        node_id = node_id_of(node_index)
        process_name = f"process{self._next_process[node_index]:03d}"
        self._next_process[node_index] += 1
        gpu = node.gpus_free > 0
        node.gpus_free -= gpu
        spec = self.settings.make_spec(node_index, node_id, process_name)
        if spec.side_inputs:
            self._side_inputs_root = side_inputs_root(spec)
        environment = self.settings.worker_environment(node_index, process_name, None)
        if gpu:
            del environment["CUDA_VISIBLE_DEVICES"]  # Ray sets it to the GPU it reserved
        info = WorkerInfo(
            id=f"{node_id}/{process_name}", node_index=node_index, node_id=node_id, process_name=process_name, slot=slot
        )
        actor = self._actor_class.options(
            num_cpus=0,
            num_gpus=1 if gpu else 0,
            max_restarts=0,
            max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.ray_id, soft=False),
        ).remote(info.id, spec, environment, gpu, self._mailbox, self.settings.memory_limit, os.getcwd())
        handle = _Handle(info, actor, node, spec.logs, gpu)
        self._handles[info.id] = handle
        handle.start_ref = actor.start.remote()
        self._refs[handle.start_ref] = ("start", info.id)

    def replace(self, worker: WorkerInfo) -> None:
        self._check_open()
        if self._nodes[worker.node_index].lost:
            self._waiting.append((worker.node_index, worker.slot))
            self._next_rebind = 0.0
        else:
            self._spawn(worker.node_index, worker.slot)

    def processes(self) -> dict[str, list[tuple[str, int]]]:
        """Workers on this machine's Ray node(s): the only ones psutil here can observe."""
        found: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
        for handle in list(self._handles.values()):
            if handle.info.pid is not None and handle.node.address in self._here:
                found[handle.info.node_id].append((handle.info.process_name, handle.info.pid))
        return found

    # Feeding and waiting ------------------------------------------------------------------------

    def submit(self, worker: WorkerInfo, mini_batch: MiniBatch, attempt: int, timeout: float | None) -> None:
        self._check_open()
        handle = self._handles[worker.id]
        if handle.state != "ready":
            raise RuntimeError(f"worker {worker.id} is {handle.state}, not ready")
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
            self._rebind_lost_nodes(now)
            if self._events:
                break
            self._poll(max(0.0, min(end, self._next_wakeup(now)) - now))
            if not self._events and time.monotonic() >= end:
                return []
        events = list(self._events)
        self._events.clear()
        return events

    def _next_wakeup(self, now: float) -> float:
        times = [now + 3600]
        for handle in self._handles.values():
            times += [t for t in (handle.deadline, handle.kill_at) if t is not None]
        if self._waiting:
            times.append(self._next_rebind)
        return min(times)

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
        elif handle.state == "ready":
            self._take_results(handle, ref)

    def _take_results(self, handle: _Handle, ref: Any) -> None:
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
            self._events.append(Finished(handle.info, head.mini_batch, head.attempt, outcome))
            if head.ref == ref:
                return

    def _started(self, handle: _Handle, value: tuple[Any, ...]) -> None:
        """("ready", pid, gpu) or ("init_failed", error, pid, gpu) from the actor's start()."""
        pid, gpu = value[-2:]
        handle.info = dataclasses.replace(handle.info, pid=pid, gpu=gpu)
        if value[0] == "ready":
            handle.state = "ready"
            self._events.append(Ready(handle.info))
            return
        error = value[1]
        self._kill(handle)
        self._forget(handle)
        self._events.append(InitFailed(handle.info, error))

    def _handle_message(self, worker_id: str, message: tuple[Any, ...]) -> None:
        kind, index, attempt, value = message
        handle = self._handles.get(worker_id)
        if handle is None or handle.state != "ready":
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
            limit = self.settings.memory_limit
            self._give_up(
                handle,
                "out_of_memory",
                f"OutOfMemory: worker used {value / 2**20:.0f} MB, above worker_memory_limit {limit / 2**20:.0f} MB",
            )

    # Losing workers ---------------------------------------------------------------------------

    def _enforce_deadlines(self, now: float) -> None:
        for handle in list(self._handles.values()):
            if handle.kill_at is not None and now >= handle.kill_at:
                summary = hang_summary(handle.logs.error) if handle.kill_reason == "timed_out" else ""
                self._give_up(handle, handle.kill_reason, handle.kill_detail + summary)
            elif handle.state == "ready" and handle.deadline is not None and now >= handle.deadline:
                head = handle.queue[0]
                detail = f"run() exceeded {head.timeout:g} s on mini-batch {head.mini_batch.index}"
                self._note_error(handle, f"{detail}; stacks of every thread:")
                handle.state, handle.deadline = "killing", None  # results that still come are not taken
                handle.kill_reason, handle.kill_detail = "timed_out", detail
                handle.kill_at = now + _DUMP_GRACE_S  # the actor's own watchdog writes its stacks meanwhile

    def _give_up(self, handle: _Handle, reason: str, detail: str) -> None:
        """Kill the actor now and report the mini-batch it was running as lost for `reason`."""
        self._kill(handle)
        self._lose(handle, reason, detail)

    def _failed(self, handle: _Handle, exc: RayError) -> None:
        """Ray says the actor is gone (a crash, or its node left), or our actor code failed."""
        if not isinstance(exc, (RayActorError, ActorUnschedulableError)):
            self._kill(handle)  # our own code raised: the worker is unusable
        cause = _ray_cause(exc)
        if _node_died(handle.node, exc):
            handle.node.lost = True
            self._lose(
                handle, "crashed", f"node {handle.info.node_id} ({handle.node.address}) left the Ray cluster: {cause}"
            )
        elif handle.state == "starting":
            self._forget(handle)
            self._events.append(
                InitFailed(handle.info, f"worker died during init(): {cause}{stderr_tail(handle.logs)}")
            )
        else:
            self._lose(
                handle,
                handle.kill_reason or "crashed",
                handle.kill_detail or f"worker process died: {cause}{stderr_tail(handle.logs)}",
            )

    def _lose(self, handle: _Handle, reason: str, detail: str) -> None:
        self._forget(handle)
        head = handle.queue.popleft() if handle.queue else None
        # The driver gives the mini-batches queued behind the head to other workers.
        self._events.append(
            Lost(handle.info, head.mini_batch if head else None, head.attempt if head else 0, reason, None, detail)
        )

    def _forget(self, handle: _Handle) -> None:
        self._handles.pop(handle.info.id, None)
        for ref in handle.refs():
            self._refs.pop(ref, None)
        if handle.gpu and not handle.node.lost:
            handle.node.gpus_free += 1  # Ray hands the freed GPU to the replacement

    def _kill(self, handle: _Handle) -> None:
        try:
            ray.kill(handle.actor, no_restart=True)
        except (RayError, ValueError):
            pass

    def _note_error(self, handle: _Handle, text: str) -> None:
        try:
            with open(handle.logs.error, "a", encoding="utf-8") as log_file:
                log_file.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")
        except OSError:
            pass

    def _rebind_lost_nodes(self, now: float) -> None:
        """Slots of a node that left wait until a node outside the job joins; then they start there."""
        if not self._waiting or now < self._next_rebind:
            return
        self._next_rebind = now + _REBIND_EVERY_S
        used = {node.ray_id for node in self._nodes.values()}
        spares = [node for node in _eligible_nodes() if node["NodeID"] not in used]
        for index in sorted({index for index, _ in self._waiting}):
            if not spares:
                return
            fresh = spares.pop(0)
            self._nodes[index] = _Node(index, fresh["NodeID"], fresh["NodeManagerAddress"], _gpu_count(fresh))
            log.warning(
                "node %s now runs on Ray node %s (%s)", node_id_of(index), fresh["NodeID"], fresh["NodeManagerAddress"]
            )
            for slot in [slot for i, slot in self._waiting if i == index]:
                self._spawn(index, slot)
            self._waiting = [(i, slot) for i, slot in self._waiting if i != index]

    # Closing ----------------------------------------------------------------------------------

    def close(self) -> None:
        """shutdown() on idle workers (bounded by shutdown_timeout), kill the rest, drop side-input copies."""
        if self._closed:
            return
        self._closed = True
        try:
            if ray.is_initialized():
                self._stop_workers()
                self._clean_nodes()
        finally:
            self._handles.clear()
            self._refs.clear()
            if self._owns_ray:
                ray.shutdown()
                _restore_env("RAY_AUTH_MODE", self._saved_auth_mode)

    def _stop_workers(self) -> None:
        handles = list(self._handles.values())
        stopping = {
            handle.actor.shutdown.remote(self.settings.shutdown_timeout): handle
            for handle in handles
            if handle.state == "ready" and not handle.queue
        }
        if stopping:
            _, pending = ray.wait(
                list(stopping), num_returns=len(stopping), timeout=self.settings.shutdown_timeout + _DUMP_GRACE_S
            )
            for ref in pending:
                self._note_error(
                    stopping[ref],
                    f"shutdown() did not finish within {self.settings.shutdown_timeout:g} s; its stacks are above",
                )
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
        remove = ray.remote(_remove_side_inputs)
        refs = [
            remove.options(
                num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node.ray_id, soft=False)
            ).remote(self._side_inputs_root)
            for node in self._nodes.values()
            if not node.lost
        ]
        ray.wait(refs, num_returns=len(refs), timeout=_STOP_WAIT_S)


# Helpers ------------------------------------------------------------------------------------------


def _check_reachable(address: str) -> None:
    """Fail fast on a `host:port` nothing listens on: Ray itself keeps retrying for minutes."""
    match = re.fullmatch(r"([\w.\-]+):(\d+)", address)
    if not match:
        return  # "auto", "ray://...": left to Ray
    deadline = time.monotonic() + _CONNECT_S
    while True:
        try:
            socket.create_connection((match.group(1), int(match.group(2))), timeout=_NODE_POLL_S).close()
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise ConfigError(
                    "ray_address",
                    f"nothing accepts connections at {address} ({exc.strerror or exc})",
                    "start the cluster, or check the address and RAY_ADDRESS",
                ) from None
            time.sleep(_NODE_POLL_S)


def _eligible_nodes() -> list[dict[str, Any]]:
    """Alive Ray nodes that take workers (a head started with num-cpus 0 does not), in node-index order:
    nodes labelled by `parallel-steps node` by their label, then the driver's node, then by address."""
    here = ray.get_runtime_context().get_node_id()

    def order(node: dict[str, Any]) -> tuple:
        label = (node.get("Labels") or {}).get(NODE_INDEX_LABEL)
        return (
            int(label) if label and label.isdigit() else sys.maxsize,
            node["NodeID"] != here,
            node["NodeManagerAddress"],
            node["NodeID"],
        )

    nodes = [node for node in ray.nodes() if node["Alive"] and node["Resources"].get("CPU", 0) > 0]
    return sorted(nodes, key=order)


def _gpu_count(node: dict[str, Any]) -> int:
    return int(node["Resources"].get("GPU", 0))


def _node_died(node: _Node, exc: BaseException) -> bool:
    if isinstance(exc, ActorUnschedulableError) or "its node has died" in str(exc):
        return True
    return not any(n["NodeID"] == node.ray_id and n["Alive"] for n in ray.nodes())


def _ray_cause(exc: BaseException) -> str:
    """The line of Ray's error that says why the actor ended, without Ray's generic advice."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    cause = lines[-1] if lines else type(exc).__name__
    return cause.split(" Some common causes")[0]


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
