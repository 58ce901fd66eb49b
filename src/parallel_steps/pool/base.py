"""The worker pool interface, and the supervision both pools share.

A pool is the only part of execution that varies (local processes, Ray actors).
The driver submits mini-batches to ready workers and reads events (protocol.py);
it never sees a process or an actor. Every failure is scoped to one worker and
the one mini-batch it held, so a pool is never "broken".

What both pools do the same way lives here: worker names, worker states, the
texts of losses, the next wake-up, and which processes this machine can observe.
"""

from __future__ import annotations

import abc
import collections
import contextlib
import enum
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..protocol import Event, WorkerInfo, WorkerSpec
from ..store.logs import mini_batch_tag

if TYPE_CHECKING:
    from ..inputs.minibatch import MiniBatch

_IDLE_WAKEUP_S = 3600.0


class WorkerState(enum.Enum):
    """Where a worker is in its life, as its pool sees it."""

    STARTING = "starting"  # started, init() not done
    READY = "ready"  # takes mini-batches
    STOPPING = "stopping"  # asked to stop, or given up on: its results are no longer taken
    GONE = "gone"


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

    Subclasses keep their workers' handles (each with an `info: WorkerInfo`) in `_handles`.
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
        worker the pool no longer knows (it was lost since the driver last looked) is ignored:
        its `Lost` event sends the driver's queue for it elsewhere.
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
        """The handle of a worker that takes mini-batches, or None when the pool lost it since the
        driver last looked (its `Lost` event sends the driver's queue for it elsewhere)."""
        self._check_open()
        handle = self._handles.get(worker.id)
        if handle is not None and handle.state is not WorkerState.READY:
            raise RuntimeError(f"worker {worker.id} is {handle.state.value}, not ready")
        return handle

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("the worker pool is not started (use it as a context manager)")


def next_wakeup(now: float, times: Iterable[float | None]) -> float:
    """The earliest of `times` (deadlines, kill times, checks), or a distant one when none is set."""
    return min((t for t in times if t is not None), default=now + _IDLE_WAKEUP_S)


# The texts of losses, the same on every pool -------------------------------------------------


def timed_out_detail(limit: float, mini_batch: int) -> str:
    return f"run() exceeded {limit:g} s {mini_batch_tag(mini_batch)}"


def out_of_memory_detail(rss: int, limit: int) -> str:
    return f"OutOfMemory: worker used {rss / 2**20:.0f} MB, above worker_memory_limit {limit / 2**20:.0f} MB"


def shutdown_cut_off_detail(timeout: float) -> str:
    return f"shutdown() did not finish within {timeout:g} s; the worker is killed"


def exit_name(code: int | None) -> str:
    """An exit code as people read it: `exit code 1`, or the signal, e.g. `SIGKILL(-9)`."""
    if code is None:
        return "an unknown exit code"
    if code < 0:
        try:
            return f"{signal.Signals(-code).name}({code})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


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
