"""The worker protocol: what crosses between the driver, the worker pools and the workers.

A leaf module (it imports nothing of the project at run time), so the driver, both
pools and the worker runtime agree on one definition without importing each other:

    driver ──submit(WorkerInfo, MiniBatch)──▶ pool ──WorkerSpec, MiniBatch──▶ worker
       ▲                                        │                               │
       └──── Ready | InitFailed | ItemsLoaded ◀─┴──────────── Outcome ◀─────────┘
             HangTimeoutChanged | Finished | Lost

Events name mini-batches by their index; the driver holds the descriptors.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .store.logs import WorkerLogPaths
    from .store.output import Part


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
    tokens: bytes | None = None  # with each file's size and mtime (or hash), encoded for the ledger

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
            self.tokens,
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
