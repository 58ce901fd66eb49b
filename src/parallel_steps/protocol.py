"""The worker protocol: what crosses between the driver, the worker pools and the workers.

A leaf module (it imports nothing of the project), so the driver, both pools, the
worker runtime and the store agree on one definition without importing each other:

    driver ──submit(WorkerInfo, MiniBatch)──▶ pool ──WorkerSpec, RunAttempts, StopWorker──▶ worker
       ▲                                        │                                            │
       └──── Ready | InitFailed | ItemsLoaded ◀─┴── WorkerReady | WorkerInitFailed ◀─────────┘
             HangTimeoutChanged | Finished | Lost   WorkerLoaded | WorkerHangTimeout
                                                    WorkerResults (Outcome) | WorkerOverMemory

Events (driver <- pool) name mini-batches by their index; the driver holds the descriptors.
Wire messages (pool <-> worker) are the same types on both pools, in the manner of
concurrent.futures' `_CallItem` / `_ResultItem`: small, frozen, cheap to pickle. The local
pool frames them on a socket (pool/local/frames.py); Ray carries them as call arguments,
return values and mailbox posts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

_MiniBatch = TypeVar("_MiniBatch")  # the descriptor (inputs/minibatch.py): opaque to the protocol


# What a worker is given and what it reports ---------------------------------------------------


@dataclass(frozen=True)
class WorkerLogPaths:
    """The files of one worker process (`processNNN` on a node); laid out by store/logs.py."""

    stdout: Path
    stderr: Path
    entry_script_log: Path
    error: Path
    mini_batches: Path
    profile: Path
    metrics: Path  # the entry script's `Run.get_context().log(...)` calls (written by the Azure ML layer)


class Part(NamedTuple):
    """A slice of a worker's spool file holding one mini-batch's rows (store/output.py writes it)."""

    path: str
    offset: int
    length: int


class LossReason(enum.StrEnum):
    """Why a worker was lost while it held a mini-batch (also the attempt's outcome in the ledger)."""

    CRASHED = "crashed"
    TIMED_OUT = "timed_out"
    OUT_OF_MEMORY = "out_of_memory"


@dataclass
class WorkerSpec:
    """Everything a worker needs, sent once when it starts."""

    node_id: str
    process_name: str
    logs: WorkerLogPaths
    parts_dir: str
    output_dir: str
    output_format: str
    append_row: bool
    entry_script: str | None = None
    entry_callables: bytes | None = None  # cloudpickled {"init": f, "run": g, "shutdown": h}
    source_directory: str | None = None
    arguments: list[str] = field(default_factory=list)
    side_inputs: dict[str, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)  # name -> path, for azureml.core's Model.get_model_path
    metrics_log: str | None = None  # where azureml.core's Run log calls go
    logging_level: str = "INFO"
    profile: bool = False
    fingerprint_mode: str = "stat"
    read_ahead: int = 0  # bytes: the next mini-batch's input is read while one runs when it is no larger
    max_concurrency: int = 1  # mini-batches an `async def run` has in flight at once (worker/in_flight.py)


@dataclass
class Outcome:
    """The result of one attempt, as the driver records it."""

    ok: bool
    items: int | None
    returned: int = 0
    part: Part | None = None
    error: str | None = None
    started: float = 0.0
    duration: float = 0.0
    fingerprint: str | None = None  # of the files as read, when the plan left it to the worker
    checks: bytes | None = None  # with a check of each file's size and mtime (or hash), for the ledger
    refused_write: tuple[int, str] | None = None  # (errno, spool) the disk refused its rows: the run stops
    input_s: float = 0.0  # of `duration`, the time spent waiting for the input (read, or its read ahead ending)
    row_errors: int = 0  # rows returned with a non-null `error` (worker/row_errors.py): failed items, not a failure
    timed_out: bool = False  # the worker cancelled an `async def run` that passed its run() timeout

    def __reduce__(self) -> tuple[type[Outcome], tuple[Any, ...]]:
        # A plain tuple: one outcome per mini-batch crosses the pipe, the dataclass default is slower.
        return Outcome, (
            self.ok,
            self.items,
            self.returned,
            self.part,
            self.error,
            self.started,
            self.duration,
            self.fingerprint,
            self.checks,
            self.refused_write,
            self.input_s,
            self.row_errors,
            self.timed_out,
        )


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
    """The worker loaded a mini-batch whose item count only reading could tell. Advisory: a pool may
    drop it when the mini-batch finishes first (`Finished.outcome.items` carries the count too)."""

    mini_batch: int
    items: int


@dataclass(frozen=True)
class HangTimeoutChanged(Event):
    """The entry script changed the time its current run() may take (None: no limit)."""

    seconds: float | None


@dataclass(frozen=True)
class Finished(Event):
    """run() returned (`outcome.ok`) or raised (`outcome.error`); the worker goes on with its queue."""

    mini_batch: int
    outcome: Outcome


@dataclass(frozen=True)
class Lost(Event):
    """The worker is gone. `mini_batch` is the one it was running (None when it was idle or
    starting); the driver gives the ones queued behind it to other workers. `exit_code` is the
    worker process's (negative: the signal), where the pool can learn it."""

    mini_batch: int | None
    reason: LossReason
    exit_code: int | None
    detail: str


# Wire messages: pool <-> worker ----------------------------------------------------------------


class _Message:
    """A wire message pickles as its class and a tuple of its fields (the dataclass default is slower)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[type[Any], tuple[Any, ...]]:
        fields: tuple[str, ...] = self.__slots__  # the subclass's, in field order
        return type(self), tuple(getattr(self, name) for name in fields)


@dataclass(frozen=True, slots=True)
class RunAttempts(_Message, Generic[_MiniBatch]):
    """To a worker: run these (mini-batch, attempt, run() timeout) triples in order, after those sent before.
    A worker with several in flight (`async def run`) runs those of `alone` with nothing else in flight: a
    loss of the worker while it ran several was blamed on none of them (pool/slots.py)."""

    attempts: list[tuple[_MiniBatch, int, float | None]]
    alone: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class StopWorker(_Message):
    """To an idle worker: run shutdown() and exit."""


@dataclass(frozen=True, slots=True)
class WorkerReady(_Message):
    """From a worker: init() returned. `gpu` is what Ray assigned it (the local pool chose its own)."""

    pid: int
    gpu: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerInitFailed(_Message):
    """From a worker: the entry script failed to import or init() raised (`error`: the traceback text)."""

    error: str
    pid: int
    gpu: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerLoaded(_Message):
    """From a worker: it read the mini-batch it runs, and now knows its item count."""

    mini_batch: int
    attempt: int
    items: int


@dataclass(frozen=True, slots=True)
class WorkerHangTimeout(_Message):
    """From a worker: the entry script gave the run() it runs `seconds` from now (None: no limit;
    negative: back to the run() timeout)."""

    mini_batch: int
    attempt: int
    seconds: float | None


@dataclass(frozen=True, slots=True)
class WorkerResults(_Message):
    """From a local worker: the outcomes of the mini-batches it finished since the last message, in order
    (a Ray actor returns those of a call from its run_many())."""

    results: list[tuple[int, Outcome]]


@dataclass(frozen=True, slots=True)
class WorkerOverMemory(_Message):
    """From a Ray actor: the run() it runs took it above worker_memory_limit (`rss` bytes); the pool
    kills it. (The local pool samples its workers' memory itself.)"""

    mini_batch: int
    attempt: int
    rss: int


@dataclass(frozen=True, slots=True)
class WorkerRunning(_Message):
    """From a Ray actor whose call carries several mini-batches: the one it runs has run `elapsed` seconds, longer
    than a quick one does (said once, by its watchdog). The ones before it in the call have ended; the pool
    counts this one's deadline from its start and blames a loss on it. A duration, not a time: the clocks of
    two nodes do not agree."""

    mini_batch: int
    attempt: int
    elapsed: float


@dataclass(frozen=True, slots=True)
class WorkerEnded(_Message):
    """From a Ray actor: a mini-batch it said it ran (`WorkerRunning`, `WorkerHangTimeout`) in a call of several
    ended. `results` are its outcome and those of the ones before it in the call not told yet, in order; the
    actor waits until the mailbox has them before it starts the next one, so a loss after it is not blamed on it."""

    mini_batch: int
    attempt: int
    results: list[tuple[int, Outcome]]


#: Everything a pool sends a local worker (a Ray actor is called instead: its run_many() and shutdown()).
ToWorker = RunAttempts[Any] | StopWorker
#: Everything a worker sends its pool.
FromWorker = WorkerReady | WorkerInitFailed | WorkerLoaded | WorkerHangTimeout | WorkerResults | WorkerOverMemory
#: What a Ray actor posts to its pool's mailbox while a call runs.
ActorPost = WorkerLoaded | WorkerHangTimeout | WorkerOverMemory | WorkerRunning | WorkerEnded
