"""`make_pool(config, make_spec)`: the one place that turns a step's configuration into a worker pool."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..config.model import ParallelRunConfig
from ..host import default_process_count, gpu_ids
from ..protocol import WorkerSpec
from .base import PoolSettings, WorkerPool


def make_pool(
    config: ParallelRunConfig, make_spec: Callable[[int, str, str], WorkerSpec], environment: Mapping[str, str]
) -> WorkerPool:
    """The pool of `config.backend`, not yet started (use it as a context manager).

    Args:
        config: the step's configuration (node and process counts, limits, backend).
        make_spec: `(node_index, node_id, process_name) -> WorkerSpec` for each worker started.
        environment: the workers' extra environment variables, with their values resolved.
    """
    gpus = gpu_ids()
    settings = PoolSettings(
        node_count=config.node_count,
        process_count_per_node=config.process_count_per_node or len(gpus) or default_process_count(),
        make_spec=make_spec,
        environment=dict(environment),
        gpu_ids=gpus,
        memory_limit=config.memory_limit_bytes,
        shutdown_timeout=config.shutdown_seconds,
    )
    if config.backend == "ray":
        from .ray.pool import RayWorkerPool

        return RayWorkerPool(settings, config.ray_address, config.first_task_creation_timeout)
    from .local.pool import LocalWorkerPool

    return LocalWorkerPool(settings)
