"""The worker pool interface: the only part of execution that varies (local processes, Ray actors).

The driver submits one mini-batch at a time to an idle worker and reads events;
it never sees a process or an actor. Every failure is scoped to one worker and
the one mini-batch it held, so a pool is never "broken".
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..inputs.minibatch import MiniBatch
    from ..worker.runtime import Outcome


@dataclass(frozen=True)
class WorkerInfo:
    """Who a worker is: `id` is `<node_id>/<process_name>`; a replacement gets a new process name."""

    id: str
    node_index: int
    node_id: str
    process_name: str
    slot: int
    pid: int | None = None
    gpu: str | None = None


@dataclass(frozen=True)
class Event:
    worker: WorkerInfo


@dataclass(frozen=True)
class Ready(Event):
    """init() returned; the worker takes mini-batches."""


@dataclass(frozen=True)
class InitFailed(Event):
    """The entry script failed to import or init() raised, or the worker died while starting."""

    error: str


@dataclass(frozen=True)
class ItemsLoaded(Event):
    """The worker loaded a mini-batch whose item count only reading could tell."""

    mini_batch: int
    items: int


@dataclass(frozen=True)
class HangTimeoutChanged(Event):
    """The entry script changed the time its current run() may take (None: no limit; -1: back to default)."""

    seconds: float | None


@dataclass(frozen=True)
class Finished(Event):
    """run() returned (`outcome.ok`) or raised (`outcome.error`); the worker is idle again."""

    mini_batch: MiniBatch
    attempt: int
    outcome: Outcome


@dataclass(frozen=True)
class Lost(Event):
    """The worker is gone: `reason` is `crashed`, `timed_out` or `out_of_memory`.

    `mini_batch` is the one it was running (None when it was idle or starting); the
    driver gives the ones queued behind it to other workers.
    """

    mini_batch: MiniBatch | None
    attempt: int
    reason: str
    exit_code: int | None
    detail: str


class WorkerPool(abc.ABC):
    """Starts, feeds, supervises and replaces workers; a context manager that always cleans up."""

    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        self._stack = contextlib.ExitStack()
        self._open = False

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

        `timeout` bounds each run() from the moment the worker starts it (None: no bound).
        """

    @abc.abstractmethod
    def next_events(self, timeout: float) -> list[Event]:
        """Every event that is in, waiting up to `timeout` seconds for the first; [] when none came."""

    @abc.abstractmethod
    def replace(self, worker: WorkerInfo) -> None:
        """Start a new worker in the slot of a lost one (it runs init() again)."""

    def processes(self) -> dict[str, list[tuple[str, int]]]:
        """node id -> [(process name, pid)] of live workers this machine can observe (resource monitor)."""
        return {}

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every worker (shutdown() with a grace period, then kill); idempotent."""

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("the worker pool is not started (use it as a context manager)")


@dataclass
class PoolSettings:
    """What any pool needs to start workers.

    `make_spec(node_index, node_id, process_name)` returns the worker's `WorkerSpec`
    (log paths, entry script, output); `environment` is added to every worker's.
    """

    node_count: int
    process_count_per_node: int
    make_spec: Any
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
