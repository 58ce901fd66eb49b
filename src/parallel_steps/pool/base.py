"""The worker pool interface, and the supervision both pools share.

A pool is the only part of execution that varies (local processes, Ray actors).
The driver submits mini-batches to ready workers and reads events (protocol.py);
it never sees a process or an actor. Every failure is scoped to one worker and
the one mini-batch it held, so a pool is never "broken".

What both pools do the same way lives here: worker names, the detail of a loss the
pool decided, and which processes this machine can observe; each worker's books, their
rules and the texts of losses are in slots.py.
"""

from __future__ import annotations

import abc
import collections
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..protocol import Event, LossReason, WorkerInfo, WorkerLogPaths, WorkerSpec
from ..store.logs import hang_summary
from .slots import Slot, WorkerState

if TYPE_CHECKING:
    from ..inputs.minibatch import MiniBatch


@dataclass
class PoolSettings:
    """What any pool needs to start workers.

    `make_spec(node_index, node_id, process_name)` returns the worker's `WorkerSpec`
    (log paths, entry script, output); `environment` is added to every worker's.
    """

    node_count: int
    process_count_per_node: int
    make_spec: Callable[[int, str, str], WorkerSpec]
    environment: dict[str, str]
    gpu_ids: list[str]
    workers_per_gpu: int = 1
    max_concurrency: int = 1  # mini-batches a worker has in flight (`async def run`)
    memory_limit: int | None = None
    shutdown_timeout: float = 60.0
    main_node_address: str = "127.0.0.1"

    def worker_environment(self, node_index: int, process_name: str, gpu: str | None) -> dict[str, str]:
        """The PARALLEL_STEPS_* variables, CUDA_VISIBLE_DEVICES and the user's variables."""
        return {
            **self.environment,
            "PARALLEL_STEPS_NODE_INDEX": str(node_index),
            "PARALLEL_STEPS_NUM_NODES": str(self.node_count),
            "PARALLEL_STEPS_MAIN_NODE_INDEX": "0",
            "PARALLEL_STEPS_MAIN_NODE_ADDRESS": self.main_node_address,
            "PARALLEL_STEPS_PROCESS_NAME": process_name,
            "CUDA_VISIBLE_DEVICES": gpu or "",
        }


class WorkerPool(abc.ABC):
    """Starts, feeds, supervises and replaces workers; a context manager that always cleans up.

    Subclasses keep their workers' handles (each with an `info: WorkerInfo` and a `slot: Slot`) in `_handles`.
    """

    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        self._handles: dict[str, Any] = {}
        self._next_process: collections.Counter[int] = collections.Counter()
        self._stack = contextlib.ExitStack()
        self._open = False
        self.shutdown_cut_off: list[str] = []  # workers whose shutdown() close() had to cut off

    def __enter__(self) -> WorkerPool:
        self._stack.__enter__()
        self._stack.callback(self.close)
        self._open = True
        try:
            self.start()
        except BaseException:
            self._stack.close()  # __exit__ is not called when __enter__ raises: stop what did start
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._open = False
        self._stack.__exit__(*exc)

    @abc.abstractmethod
    def start(self) -> None:
        """Start every worker; each reports Ready or InitFailed."""

    @abc.abstractmethod
    def submit(self, worker: WorkerInfo, mini_batch: MiniBatch, attempt: int, timeout: float | None) -> None:
        """Queue one mini-batch on a ready worker; it runs its queue in order, one at a time.

        `timeout` bounds each run() from the moment the worker starts it (None: no bound). A
        worker the pool no longer knows, or has given up on (lost, timed out or over its memory
        limit since the driver last looked), is ignored: its `Lost` event sends the driver's
        queue for it elsewhere.
        """

    @abc.abstractmethod
    def next_events(self, timeout: float) -> list[Event]:
        """Every event that is in, waiting up to `timeout` seconds for the first; [] when none came."""

    @abc.abstractmethod
    def replace(self, worker: WorkerInfo) -> None:
        """Start a new worker in the slot of a lost one (it runs init() again)."""

    @abc.abstractmethod
    def close(self, grace: float | None = None) -> None:
        """Stop every worker: shutdown() on idle ones, bounded by `grace` (default the settings'
        `shutdown_timeout`; 0 kills at once), then kill whatever is left and list it in
        `shutdown_cut_off`. Idempotent; returns within the bound plus a few seconds, whatever
        the entry script does."""

    def kill_workers(self) -> None:
        """Kill every worker now; safe from another thread (the termination guard), so that a `close`
        waiting on a shutdown() that sleeps returns."""
        for handle in list(self._handles.values()):
            handle.kill()

    def processes(self) -> dict[str, list[tuple[str, int]]]:
        """node id -> [(process name, pid)] of live workers this machine can observe (resource monitor)."""
        found: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
        for handle in list(self._handles.values()):
            info = handle.info
            if info.pid is not None and self._observable(handle):
                found[info.node_id].append((info.process_name, info.pid))
        return found

    def _observable(self, handle: Any) -> bool:
        """Whether psutil on this machine sees the worker's process."""
        return True

    def _new_worker(self, node_index: int, slot: int) -> WorkerInfo:
        """The identity of a new worker in a slot: the node's next process name."""
        node_id = node_id_of(node_index)
        process_name = f"process{self._next_process[node_index]:03d}"
        self._next_process[node_index] += 1
        return WorkerInfo(
            id=f"{node_id}/{process_name}", node_index=node_index, node_id=node_id, process_name=process_name, slot=slot
        )

    def _ready(self, worker: WorkerInfo) -> Any:
        """The handle of a worker that takes mini-batches, or None when the pool lost it or gave it up
        (timed out, over its memory limit) since the driver last looked: its `Lost` event, which a given-up
        worker's kill brings, sends the driver's queue for it elsewhere."""
        self._check_open()
        handle = self._handles.get(worker.id)
        return handle if handle is not None and handle.slot.state is WorkerState.READY else None

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("the worker pool is not started (use it as a context manager)")


def decided_loss(slot: Slot, logs: WorkerLogPaths) -> str:
    """The detail of a loss the pool decided ("" when it decided none): a time-out's gets where run()
    hung, read from the stacks the worker wrote to its error log."""
    if slot.loss is LossReason.TIMED_OUT:
        return slot.loss_detail + hang_summary(logs.error)
    return slot.loss_detail


# Processes ------------------------------------------------------------------------------------


def tree_rss(pid: int) -> int:
    """Resident memory of a worker and every process it started (0 when it is gone)."""
    import psutil

    try:
        process = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])
    except psutil.Error:
        return 0


def node_id_of(node_index: int) -> str:
    return f"node{node_index}"
