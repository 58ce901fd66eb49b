"""The configuration by layer: the small typed sections of a `ParallelRunConfig` that the planner, the
driver and the pool factory take, instead of the whole configuration.

A leaf module (frozen dataclasses only), so the layers below the configuration depend on
what they read and nothing else; `ParallelRunConfig` projects each section with one method
(`plan_settings`, `thresholds`, `driver_policy`, `pool_config`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..inputs.datasets import Dataset


@dataclass(frozen=True)
class PlanSettings:
    """How the inputs are cut into mini-batches (`inputs/planner.py`)."""

    inputs: list[Dataset]  # lists, as the planners take them (the config's own, not copied)
    batch_size: int  # files per mini-batch, or bytes per mini-batch for tabular inputs
    partition_keys: list[str] | None
    fingerprint: str  # reuse_fingerprint: stat or content
    partitions: list[str] | None = None  # the keys, when `inputs` are each partition's inputs, key after key


@dataclass(frozen=True)
class Thresholds:
    """What decides Succeeded or Failed for the same results (-1, or None, turns a threshold off)."""

    error_threshold: int = -1
    mini_batch_error_threshold: int = -1
    allowed_failed_count: int | None = None
    allowed_failed_percent: float = 100
    max_tolerated_failure_rate: float = -1
    max_same_error: int = -1


#: The configuration fields of `Thresholds`: a cached result stands only under the same ones (prefect/cache.py).
OUTCOME_FIELDS = tuple(field.name for field in dataclasses.fields(Thresholds))


@dataclass(frozen=True)
class DriverPolicy:
    """What the driver decides by: retries, thresholds and the timeouts that end a job making no progress."""

    thresholds: Thresholds
    fault_tolerant_policy: str  # OnFailure | ExitCodeAndErrorMsg | Never
    run_max_try: int
    retryable_errors: tuple[str, ...]
    retryable_exit_codes: tuple[int, ...]
    run_invocation_timeout: float
    first_task_creation_timeout: float
    hang_detection: bool
    progress_timeout: float  # progress_update_timeout, or its default
    termination_grace: float = 20.0  # how long a canceled run takes at most to stop (driver/termination.py)
    read_ahead: bool = False  # each worker holds one more mini-batch, whose input it reads while one runs
    max_concurrency: int = 1  # mini-batches each worker has in flight (`async def run`)


@dataclass(frozen=True)
class PoolConfig:
    """What `pool/factory.py` reads to choose and size a pool."""

    backend: str  # local | ray
    ray_address: str | None
    node_count: int
    process_count_per_node: int | None  # None: the GPU count on a GPU machine, else the CPU count
    memory_limit: int | None  # bytes
    shutdown_timeout: float
    node_wait_s: float  # first_task_creation_timeout: how long Ray nodes may take to appear
